# Sourced by scripts/train.sh and scripts/train_once.sh (its Python twin: fairseq_alibi/flags.py).
flag_value() {  # FLAG ARGS...: the value after the last FLAG in ARGS (the one argparse keeps), or empty
  local flag=$1 value= previous= arg
  shift
  for arg in "$@"; do
    [ "$previous" = "$flag" ] && value=$arg
    previous=$arg
  done
  echo "$value"
}
