from setuptools import find_packages, setup

setup(
    name="fairseq-alibi",
    version="0.1.0",
    description="ALiBi (Train Short, Test Long) as a fairseq plugin",
    packages=find_packages(include=["fairseq_alibi", "fairseq_alibi.*", "fairseq_alibi_lab", "fairseq_alibi_lab.*"]),  # the library, the lab
    python_requires=">=3.10",  # torch 2.13.0, the pinned CPU wheel, has none older
    install_requires=[
        # torch 2.13.0 is what CI and the README install first; any torch 2.x that fairseq accepts works.
        "torch>=2.1",
        # fairseq 0.12.2 does not import on Python >= 3.11; fairseq-fixed ships the same `fairseq` module.
        "fairseq-fixed==0.12.3.1; python_version >= '3.11'",
        "fairseq>=0.12.2,<0.13; python_version < '3.11'",
        "matplotlib",
        "tensorboard",  # scripts/train.sh logs there by default
        # fairseq's speech tasks look for it on every import and print "Please install tensorboardX"
        # without it, on every start of every tool.
        "tensorboardX",
        "sacremoses",  # raw text in and out of the hub interface (tokenizer="moses")
        "scipy",  # the t tests beside the claims' verdicts (fairseq_alibi_lab/claims.py)
    ],
    # pytest-xdist: make test runs the suite on every core.
    # hf: export to and import from Hugging Face (fairseq_alibi/hf/), and lm-eval on exported models.
    extras_require={"test": ["pytest", "pytest-xdist"],
                    "hf": ["transformers>=5,<6", "tokenizers", "safetensors", "lm-eval", "accelerate"],
                    # fairseq_alibi/hf/onnx.py's graphs, run by ONNX Runtime (tests/library/test_onnx.py)
                    "onnx": ["onnx", "onnxruntime"]},
    # fairseq's tools with the plugin loaded, from any directory (fairseq_alibi/commands/cli.py).
    entry_points={"console_scripts": [
        f"fairseq-alibi-{tool.replace('_', '-')}=fairseq_alibi.commands.cli:{tool}"
        for tool in ("train", "eval_lm", "generate", "interactive")
    ] + ["fairseq-alibi-export-hf=fairseq_alibi.hf.export:main", "fairseq-alibi-import-hf=fairseq_alibi.hf.import_gpt2:main",
         "fairseq-alibi-lm-eval=fairseq_alibi.hf.lm_eval_backend:main"]},
)
