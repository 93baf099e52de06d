# Sourced by the scripts and presets for --help: a script's usage is its header comment.

script_help() {  # SCRIPT: print the comment block at the top of SCRIPT, after its #! line
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
}

preset_usage() {  # SCRIPT [the preset's arguments...]: presets take no arguments, only environment
  # variables; --help (-h) prints the header and starts nothing, any other argument is refused.
  local script=$1
  shift
  [ $# -eq 0 ] && return 0
  case $1 in
    -h|--help) script_help "$script"; exit 0 ;;
    *) echo "error: $(basename "$script") takes no arguments (got '$1'): it reads environment variables; see $script --help" >&2
       exit 2 ;;
  esac
}

positive_integers() {  # NAME VALUE...: exit with one line unless every VALUE is a positive integer
  local name=$1 value
  shift
  [ $# -gt 0 ] || { echo "error: $name is empty: give a positive integer" >&2; exit 1; }
  for value in "$@"; do
    case $value in ''|*[!0-9]*|0|0*) echo "error: $name: '$value' is not a positive integer" >&2; exit 1 ;; esac
  done
}
