"""Hugging Face, both ways (docs/hugging-face.md): export.py writes any causal LM of the plugin (and
fairseq's own sinusoidal or learned-position transformer_lm) as a transformers folder whose one
modeling file (modeling_fairseq_alibi.py with the position math bundled by bundle.py) needs torch
and transformers only; tokenizer.py gives it fairseq's word-level ids; import_gpt2.py brings a
GPT2LMHeadModel into fairseq. Importing this package imports no fairseq."""


def environment_problem():
    """None, or the one line for an installation transformers cannot import in: a torchaudio built
    for another torch (pip install ".[hf]" lets fairseq pull the newest) that transformers imports
    and fails on. transformers 5 does not import it for what the tools use, so such an installation
    works (tests/end_to_end/test_install.py): it is refused only where the import does fail."""
    import importlib.metadata as metadata

    try:
        audio, torch_version = metadata.version("torchaudio"), metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
    if audio.split("+")[0].split(".")[:2] == torch_version.split("+")[0].split(".")[:2]:
        return None
    try:
        import transformers.modeling_utils  # noqa: F401  (what every tool of ours loads)
    except Exception:  # noqa: BLE001  (a library built for another torch fails in many ways)
        return (f"torchaudio {audio} is installed, built for another torch than this {torch_version}, and transformers "
                "imports it and fails. Nothing here uses audio: pip uninstall torchaudio (scripts/setup.sh does)")
    return None
