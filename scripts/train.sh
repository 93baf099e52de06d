#!/usr/bin/env bash
# Train a position method's LM, or the sinusoidal twin (stock fairseq), at one training length L.
#
#   scripts/train.sh METHOD L DATA SAVE_DIR [PRESET] [-- extra fairseq-train flags]
#
# METHOD: a position method of fairseq_alibi/positions/ (alibi, rotary, t5_bias, nope, kerple,
# sandwich, fire, learned_alibi, fox, ...: --arch METHOD_transformer_lm_PRESET) | sinusoidal.  PRESET: wiki103 (default; the paper's
# recipe) | small (CPU scale) | bloom_small (ALiBi only: the small recipe in BLOOM's layout, which
# fairseq-alibi-export-hf writes as stock BLOOM) | gpt2_small (the small recipe in GPT-2's layout:
# METHOD learned, an imported GPT-2 continued, or alibi, its conversion; fine-tune with
# --finetune-from-model). Method options go after --, e.g. -- --kerple-variant power.
# TensorBoard logs go to SAVE_DIR/tensorboard (view: tensorboard --logdir SAVE_DIR/tensorboard).
# Rerunning the same command resumes from SAVE_DIR/checkpoint_last.pt (fairseq's own resume); a
# finished run (its --max-update reached) is left as it is. A SAVE_DIR holding another run (another
# architecture or L, or started with other flags: SAVE_DIR/train_flags.json) is refused;
# CONTINUE_RUN=1 continues it anyway. One training per SAVE_DIR at a
# time (SAVE_DIR/.train.lock); DATA's dict.txt is kept in SAVE_DIR, and a fine-tune
# (--finetune-from-model) from a checkpoint of another dictionary is refused.
# Multi-GPU on one node: just run it (fairseq spawns one process per GPU). Multi-node: run it
# under SLURM's srun or torchrun, which set SLURM_NTASKS / WORLD_SIZE.
set -euo pipefail
# The checks and the command: fairseq_alibi_lab/train.py, which then runs fairseq-train in its own process.
case ${1:-} in -h|--help)
  source "$(dirname "$0")/usage.sh"; script_help "$0"; exec python3 -m fairseq_alibi_lab.train --usage ;;
esac
exec python3 -m fairseq_alibi_lab.train "$@"
