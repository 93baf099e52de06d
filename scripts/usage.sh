# Sourced by the scripts for --help: a script's usage is its header comment.

script_help() {  # SCRIPT: print the comment block at the top of SCRIPT, after its #! line
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
}
