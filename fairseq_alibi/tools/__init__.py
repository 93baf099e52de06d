"""Pure helpers the library's commands (commands/) and the lab share: the one checkpoint reader, the one
flag reader, the dictionary check, whole-file writes and provenance. No fairseq import, and nothing of
the library's fairseq side (models/, commands/)."""
