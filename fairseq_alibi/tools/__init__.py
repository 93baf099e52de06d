"""The command-line tools (cli.py: fairseq's tools with the plugin loaded; convert_checkpoint.py)
and what they share with the lab: the one checkpoint reader, the one flag reader, the dictionary
check, whole-file writes, provenance and the fairseq mistakes refused in one line. No fairseq import
except convert_checkpoint's."""
