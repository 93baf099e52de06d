# Sourced first by every preset: they take no arguments, only environment variables. --help (-h)
# prints the preset's header comment and starts nothing; any other argument is refused the same way.
preset_usage() {  # SCRIPT [the preset's arguments...]
  local script=$1
  shift
  [ $# -eq 0 ] && return 0
  case $1 in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$script"; exit 0 ;;
    *) echo "error: $(basename "$script") takes no arguments (got '$1'): it reads environment variables; see $script --help" >&2
       exit 2 ;;
  esac
}
