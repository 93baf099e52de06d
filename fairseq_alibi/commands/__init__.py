"""The library's commands, fairseq's side: cli.py (fairseq's tools with the plugin loaded: the
fairseq-alibi-* entry points), convert_checkpoint.py (a checkpoint given ALiBi or made current) and
mistakes.py (the fairseq mistakes refused in one line before a tool runs). They import the models;
the pure helpers they share with the lab are in tools/, which imports nothing of fairseq's side."""
