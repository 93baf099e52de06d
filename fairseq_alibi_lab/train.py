"""scripts/train.sh's logic: check a training before it starts, then run fairseq-train.

    python3 -m fairseq_alibi_lab.train METHOD L DATA SAVE_DIR [PRESET] [-- extra fairseq-train flags]

(scripts/train.sh's header is the user's documentation.) Every check is made before anything is
written; a refusal is one line. fairseq-train then runs (in this process, unless the job has
several: fairseq_train), SAVE_DIR/.train.lock held for its lifetime; when it ends, the data's
dictionary fingerprint goes into every checkpoint that does not record it in its config (a stock
twin's: fairseq_alibi/tools/dictionaries.py record). With WAIT_FOR_RUN=1 (the runner's), a training
another process holds is waited for, then resumed or left finished, instead of refused.
"""
import os
import subprocess
import sys
import traceback

from fairseq_alibi.tools import dictionaries
from fairseq_alibi.commands import mistakes
from fairseq_alibi.tools.flags import last_value
from fairseq_alibi_lab import recipes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = ("wiki103", "small", "bloom_small", "gpt2_small")
# Presets whose learning rate reaches 0 at the run's last update (unless told otherwise).
SCHEDULED = ("small", "bloom_small", "gpt2_small")
# The flags every training here takes besides its model, recipe and length (tests/lab/test_configs.py
# holds the hydra configs to them).
TRAINING = ["--task", "language_modeling", "--criterion", "adaptive_loss", "--ddp-backend", "legacy_ddp",
            "--sample-break-mode", "none", "--skip-invalid-size-inputs-valid-test", "--no-epoch-checkpoints",
            "--keep-interval-updates", "1"]
GPU_DRIVERS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def fail(message):
    raise SystemExit(f"error: {message}")


def usage(methods):
    return (f"usage: scripts/train.sh {'|'.join(methods)}|sinusoidal|learned L DATA SAVE_DIR "
            f"[{'|'.join(PRESETS)}] [-- flags]")


def model_flags(method, preset, methods, extra=()):
    """The flags that choose the model: the method's architecture in the preset, or a stock twin
    (twins.py); an imported GPT-2 continued with its --masked-output-symbols (in the extra flags) is
    the twin as gpt2_transformer_lm, the model that takes them."""
    plugin = ["--user-dir", os.path.join(REPO, "fairseq_alibi")]
    if preset == "wiki103" and method == "sinusoidal":
        return ["--arch", "transformer_lm_wiki103"]
    if preset == "bloom_small":
        if method != "alibi":
            fail("the bloom_small preset is ALiBi's in BLOOM's layout (stock BLOOM computes no other method): use METHOD alibi")
        return [*plugin, "--arch", "alibi_transformer_lm_bloom_small"]
    if preset == "gpt2_small":
        if method == "alibi":
            return [*plugin, "--arch", "alibi_transformer_lm_gpt2_small"]
        if method == "learned":
            from fairseq_alibi.twins import GPT2_SMALL_TWIN_FLAGS
            if "--masked-output-symbols" in extra:
                return [*plugin, "--arch", "gpt2_transformer_lm", *GPT2_SMALL_TWIN_FLAGS.split()[2:]]
            return GPT2_SMALL_TWIN_FLAGS.split()
        fail("the gpt2_small preset is an imported GPT-2 (METHOD learned) and its ALiBi conversion (METHOD alibi): "
             "use one of those")
    if preset == "small" and method == "sinusoidal":
        from fairseq_alibi.twins import SMALL_TWIN_FLAGS
        return SMALL_TWIN_FLAGS.split()
    if preset in ("wiki103", "small"):
        if method not in methods:
            fail(f"unknown method '{method}': use one of {' '.join(methods)} sinusoidal")
        return [*plugin, "--arch", f"{method}_transformer_lm_{preset}"]
    fail(f"unknown preset '{preset}': use wiki103, small, bloom_small or gpt2_small")


def gpus_on_this_node():
    """torch's GPU count, asked (seconds to import) only where a GPU driver shows; else 0."""
    if not any(os.path.exists(path) for path in GPU_DRIVERS):
        return 0
    import torch

    return torch.cuda.device_count()


def launcher_flags(node_gpus):
    """(processes in this job, fairseq's distributed flags): the launcher's world size (torchrun's
    WORLD_SIZE, SLURM's SLURM_NTASKS), else one per GPU on this node."""
    world = os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or str(node_gpus)
    if not world.isdigit():
        fail(f"WORLD_SIZE / SLURM_NTASKS must be a whole number of processes, got '{world}'")
    if node_gpus == 0 and int(world) > 1:
        fail(f"WORLD_SIZE / SLURM_NTASKS asks for {world} processes, but this machine has no GPU: fairseq's "
             "distributed training needs one GPU per process; unset it to train on CPU (one process)")
    # fairseq starts its distributed set-up only when told the world size; SLURM also needs a port.
    if os.environ.get("WORLD_SIZE"):
        return int(world), ["--distributed-world-size", os.environ["WORLD_SIZE"]]
    if int(os.environ.get("SLURM_NTASKS") or 1) > 1:
        return int(world), ["--distributed-world-size", os.environ["SLURM_NTASKS"],
                            "--distributed-port", os.environ.get("MASTER_PORT", "29500")]
    return int(world), []


def fairseq_train(command, plugin, world):
    """fairseq-train COMMAND[1:]'s exit status. One process (CPU, one GPU): fairseq-train's own entry
    point, in this process (a second would start Python, torch and fairseq again: seconds per
    training). Several: the fairseq-train command, whose spawned workers import this package after
    fairseq (here it was imported first, so --user-dir would find it unregistered)."""
    if world > 1:
        try:
            return subprocess.call(command)
        except KeyboardInterrupt:  # Ctrl-C reaches fairseq-train too (one process group): it stops, and we after it
            return 130
    sys.argv = command
    try:
        from fairseq_cli import train  # fairseq's logging is set up when this is imported

        if plugin:  # this package was imported before fairseq, so --user-dir finds it imported, unregistered
            import fairseq_alibi.plugin  # noqa: F401
        train.cli_main()
    except SystemExit as e:  # fairseq's and argparse's refusals; the message is printed as it would be
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    except KeyboardInterrupt:
        return 130
    except Exception:  # fairseq's own error: its traceback, as fairseq-train would show it
        traceback.print_exc()
        return 1
    return 0


def continuing(extra, save_dir, data):
    """extra with --continue-from PATH (ours: a curriculum's second stage) made fairseq's: on the run's first
    launch (no checkpoint_last.pt yet) --continue-once PATH, its weights, optimizer, schedule and update count
    continued, and --reset-dataloader (its data iterator was over another length's batches); once the run
    has saved, fairseq resumes it from its own checkpoint as any run."""
    start = last_value(extra, "--continue-from")
    if start is None:
        return extra
    if "--finetune-from-model" in extra or "--continue-once" in extra:
        fail("--continue-from continues a checkpoint: leave out --finetune-from-model and --continue-once")
    if not os.path.isfile(start):
        fail(f"--continue-from {start}: no checkpoint there (train the first stage first)")
    problem = dictionaries.check(start, data)
    if problem:
        fail(problem)
    rest = [f for i, f in enumerate(extra) if f != "--continue-from" and (i == 0 or extra[i - 1] != "--continue-from")]
    if os.path.isfile(os.path.join(save_dir, "checkpoint_last.pt")):
        return rest
    return [*rest, "--continue-once", start, "--reset-dataloader"]


def main(argv):
    from fairseq_alibi.methods import CAUSAL_METHODS
    from fairseq_alibi.commands.cli import inference_only_flag

    methods = list(CAUSAL_METHODS)
    if argv == ["--usage"]:  # train.sh --help: after its header
        print(usage(methods))
        return
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    positional = argv[:argv.index("--")] if "--" in argv else argv
    if len(positional) not in (4, 5):
        print(usage(methods), file=sys.stderr)
        raise SystemExit(2)
    method, length, data, save_dir = positional[:4]
    preset = positional[4] if len(positional) == 5 else "wiki103"

    if not os.path.isfile(os.path.join(data, "dict.txt")):
        fail(f"{data} has no dict.txt: run scripts/prepare-wikitext.sh first ({usage(methods)})")
    if not length.isdigit() or length.startswith("0"):
        fail(f"L: '{length}' is not a positive integer")
    evaluation_only = inference_only_flag(extra)
    if evaluation_only:
        fail(f"{evaluation_only} is for evaluation (scripts/eval.sh's SCALING): a model trained with it would be "
             "scored scaled ever after (a fine-tune that continues a checkpoint may take it: YaRN's recipe)")
    # The small preset's adaptive input/softmax bands end at word 10000 (unless the flags say otherwise).
    if preset == "small" and "--adaptive-softmax-cutoff" not in extra:
        with open(os.path.join(data, "dict.txt"), encoding="utf-8") as f:
            words = sum(1 for _ in f) + 4  # fairseq's 4 special symbols come first
        if words < 10000:
            fail(f"the small preset's adaptive cutoffs 2000,10000 need at least 10000 words, {data} has {words}: pass "
                 "-- --adaptive-input-cutoff A,B --adaptive-softmax-cutoff A,B with B <= " + str(words))
    model = model_flags(method, preset, methods, extra)

    node_gpus = gpus_on_this_node()
    world, launcher = launcher_flags(node_gpus)
    recipe = recipes.recipe(preset, int(length), max(world, 1))
    # Mistakes fairseq would answer with a traceback or a run without end.
    mistake = mistakes.common_mistake("train", [*recipe, *extra], node_gpus)
    if mistake:
        fail(mistake)
    if node_gpus > 0:
        precision = ["--fp16"]
    else:
        print("warning: no GPU found: training on CPU in fp32 (--fp16 dropped)", file=sys.stderr)
        precision = ["--cpu"]

    args = [*recipe, *extra]
    max_update = last_value(args, "--max-update")
    arch = last_value(model, "--arch")
    schedule = []
    if preset in SCHEDULED and "--total-num-update" not in extra:
        schedule = ["--total-num-update", max_update]
    # what the run learns with and from (recipes.RUN_FLAGS)
    run_flags = recipes.with_training_data([*model, *recipe, *extra, *schedule], data)

    # What a checkpoint already in SAVE_DIR holds: refuse another run, skip a finished one.
    os.makedirs(save_dir, exist_ok=True)
    rank = last_value(extra, "--distributed-rank") or os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
    if rank == "0":  # one training per save directory; a distributed run is one training, rank 0 holds it
        try:
            lock = recipes.hold_run(save_dir, wait=os.environ.get("WAIT_FOR_RUN") == "1")
        except recipes.RunConflict as e:
            fail(e)
        os.set_inheritable(lock, True)  # a fairseq-train process (several GPUs) holds it too, should this one be killed first
    try:
        state, done = recipes.run_status(save_dir, arch, int(length), int(max_update),
                                         os.environ.get("CONTINUE_RUN") == "1", run_flags)
    except recipes.RunConflict as e:
        fail(e)
    if state == "finished":
        print(f"{save_dir} is already trained ({done} updates, --max-update {max_update}): nothing to do")
        return
    # The data's dictionary kept beside the checkpoints (fairseq's do not hold theirs): scoring or
    # fine-tuning on another corpus's dictionary is then refused.
    problem = dictionaries.keep(data, save_dir)
    if problem:
        fail(problem)
    if state == "new" and rank == "0":
        recipes.record_flags(save_dir, run_flags)
    finetune_from = last_value(extra, "--finetune-from-model")
    if finetune_from:
        problem = dictionaries.check(finetune_from, data)
        if problem:
            fail(problem)
    extra = continuing(extra, save_dir, data)

    # The plugin's models record their data's dictionary in every checkpoint's config (not a run
    # flag: a run started before it was recorded resumes).
    recorded = ["--dictionary-sha256", dictionaries.dictionary_fingerprint(data)] if "--user-dir" in model else []
    command = ["fairseq-train", data, "--save-dir", save_dir, *model, *TRAINING, "--tokens-per-sample", length,
               "--tensorboard-logdir", os.path.join(save_dir, "tensorboard"), *recipe, *precision, *launcher, *extra,
               *schedule, *recorded]
    sys.stdout.flush()
    code = fairseq_train(command, "--user-dir" in model, world)
    if rank == "0":  # what was saved, finished or not, records its dictionary (a stock twin's config cannot)
        problem = dictionaries.record(save_dir, data)
        if problem:
            fail(problem)
    raise SystemExit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
