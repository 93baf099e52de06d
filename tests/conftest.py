import functools
import os
import shutil

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Under pytest-xdist (make test: one worker per core), each worker's torch gets its share of the
# cores: two workers of two threads each on two cores ran the math tests several times slower.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    torch.set_num_threads(share)
    # And the fairseq processes the end-to-end tests start: each would take every core otherwise.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(share)
USER_DIR = os.path.join(REPO, "fairseq_alibi")
SHARED_WIKITEXT2 = os.path.join(REPO, "..", "shared", "data", "wikitext-2")


@functools.lru_cache(maxsize=None)
def find_wikitext2():
    """The raw WikiText-2 files: WIKITEXT2_DIR, else this workspace's shared copy, else what
    `make experiment` would use: scripts/prepare-wikitext.sh with WIKITEXT2_SOURCE (a directory,
    archive or URL) or the download mirror, verified against the published checksums."""
    if os.environ.get("WIKITEXT2_DIR"):
        return os.environ["WIKITEXT2_DIR"]
    if os.path.isdir(SHARED_WIKITEXT2):
        return SHARED_WIKITEXT2
    source = os.environ.get("WIKITEXT2_SOURCE", "")
    if os.path.isdir(source):
        return source
    import subprocess

    proc = subprocess.run(["scripts/prepare-wikitext.sh", "2", *([source] if source else [])], cwd=REPO,
                          capture_output=True, text=True)
    raw = os.path.join(REPO, os.environ.get("RAW_DIR", "data-raw"), "wikitext-2")
    if proc.returncode != 0 or not os.path.isfile(os.path.join(raw, "wiki.train.tokens")):
        why = (proc.stderr.strip().splitlines() or [f"no WikiText-2 files in {raw}"])[-1]
        pytest.fail(f"WikiText-2 is needed by the tests: {why} (or set WIKITEXT2_DIR to a directory "
                    "with wiki.{train,valid,test}.tokens)", pytrace=False)
    return raw


def build_model(arch="alibi_transformer_lm", vocab=50, extra=(), task="language_modeling"):
    """An untrained model in eval mode, built through fairseq's own argument parsing."""
    from fairseq_alibi.models.build import build_model as build

    model, dictionary = build(arch, vocab, extra, task)
    return model.eval(), dictionary


# A tiny pre-norm model with a plain (tied) output projection, for exact comparisons.
TINY = [
    "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-input-dim", "32",
    "--decoder-output-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-normalize-before",
    "--share-decoder-input-output-embed",
]


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    return build_model(extra=TINY)[0]


def snapshot(root):
    """Every file under root, by path, with its bytes: compare before and after to see nothing changed."""
    return {os.path.join(d, name): open(os.path.join(d, name), "rb").read()
            for d, _, files in os.walk(root) for name in files}


def modules(packages):
    """The .py files of these packages of the repository, as paths relative to it with / (the layout tests)."""
    for package in packages:
        for folder, _, names in os.walk(os.path.join(REPO, package)):
            for name in names:
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(folder, name), REPO).replace(os.sep, "/")


def random_tokens(dictionary_size, batch, length, seed=0):
    g = torch.Generator().manual_seed(seed)
    # fairseq's Dictionary has 4 special symbols first; sample real words only
    return torch.randint(4, dictionary_size, (batch, length), generator=g)


def run(cmd, **kwargs):
    """Run a command, failing the test with its output if it fails."""
    import subprocess

    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=kwargs.pop("cwd", REPO), **kwargs)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def bit_identical(a, b):
    """Equal bit for bit; fairseq's `_float_tensor` dtype markers are uninitialised and may hold NaN,
    which torch.equal calls unequal to itself."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8)))


def built_once(tmp_path_factory, name, build):
    """A directory that `build(path)` fills once per test run: under pytest-xdist, the first worker
    to ask builds it while the others wait (a file lock), instead of each worker building its own."""
    from filelock import FileLock  # a dependency of torch

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, shared by its workers
    path = root / f"built-{name}"
    with FileLock(f"{path}.lock"):
        if not (root / f"built-{name}.done").exists():
            shutil.rmtree(path, ignore_errors=True)  # a build that failed in another worker
            path.mkdir()
            build(path)
            (root / f"built-{name}.done").touch()
    return path


# The slowest tests first, so that under pytest-xdist (one test at a time per worker: the Makefile's
# --maxschedchunk 1) no worker starts a long one when the others are almost done.
SLOW_FIRST = ["test_the_device_script_runs_every_step_at_toy_sizes", "test_the_gpt2_experiment_runs_through_the_runner", "test_the_conversion_experiment_runs_through_the_runner", "test_experiment_runner_toy_run", "test_every_method_trains",
              "test_masked_lm_presets_toy_run", "test_the_retrieval_experiment_runs_through_the_runner",
              "test_the_streaming_experiment_runs_through_the_runner", "test_synthetic_tasks_preset_toy_run", "test_trade_preset_toy_run",
              "test_benchmark_smoke", "test_littlebird_benchmark_smoke", "test_distillation_training"]


def pytest_collection_modifyitems(items):
    def rank(item):
        heavy = [i for i, name in enumerate(SLOW_FIRST) if item.name.startswith(name)]
        return heavy[0] if heavy else len(SLOW_FIRST) + (0 if item.get_closest_marker("slow") else 1)
    items.sort(key=rank)  # stable: otherwise collection order


@pytest.fixture(scope="session")
def wt2_slice(tmp_path_factory):
    """The first lines of each WikiText-2 split, binarized (about 160k training tokens; 5.4k
    validation tokens: each toy scoring computes fairseq's full-vocabulary log-probabilities at every
    position of every window, the most of its time)."""
    return str(built_once(tmp_path_factory, "wt2", binarize_slice) / "bin")


def slice_tokens(binarized, split="valid"):
    """The tokens of a split of the slice as fairseq counts them: each line's words and its end of line."""
    with open(os.path.join(os.path.dirname(binarized), f"{split}.tokens"), encoding="utf-8") as f:
        return sum(len(line.split()) + 1 for line in f)


def binarize_slice(root):
    for split, lines in [("train", 3000), ("valid", 100), ("test", 400)]:
        with open(os.path.join(find_wikitext2(), f"wiki.{split}.tokens")) as f:
            head = [next(f) for _ in range(lines)]
        (root / f"{split}.tokens").write_text("".join(head))
    run(["fairseq-preprocess", "--only-source", "--trainpref", root / "train.tokens",
         "--validpref", root / "valid.tokens", "--testpref", root / "test.tokens",
         "--destdir", root / "bin", "--workers", "2"])


# A toy version of the small architecture: fast enough for a few dozen CPU updates in seconds.
TOY = ["--decoder-layers", "2", "--decoder-embed-dim", "64", "--decoder-input-dim", "64",
       "--decoder-output-dim", "64", "--decoder-ffn-embed-dim", "128",
       "--save-interval-updates", "10", "--log-interval", "5", "--no-progress-bar", "--dropout", "0"]


@pytest.fixture(scope="session")
def toy_checkpoint(wt2_slice, tmp_path_factory):
    """An ALiBi model trained at L=32 for 30 updates with scripts/train.sh."""
    def train(save):
        run(["scripts/train.sh", "alibi", "32", wt2_slice, save, "small", "--",
             "--max-update", "30", "--max-tokens", "1024", *TOY])
    return str(built_once(tmp_path_factory, "toy_alibi", train) / "checkpoint_last.pt")


def stock_checkpoint(wt2_slice, tmp_path_factory, name, *flags):
    """A stock sinusoidal (or, with --decoder-learned-pos, learned-position) twin of the small
    architecture, trained at L=32 for 5 updates with scripts/train.sh."""
    def train(save):
        run(["scripts/train.sh", "sinusoidal", "32", wt2_slice, save, "small", "--",
             "--max-update", "5", "--max-tokens", "1024", *TOY, *flags])
    return built_once(tmp_path_factory, name, train) / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def sinusoidal_checkpoint(wt2_slice, tmp_path_factory):
    return stock_checkpoint(wt2_slice, tmp_path_factory, "sinusoidal")


@pytest.fixture(scope="session")
def learned_checkpoint(wt2_slice, tmp_path_factory):
    return stock_checkpoint(wt2_slice, tmp_path_factory, "learned", "--decoder-learned-pos")


@pytest.fixture(scope="session")
def fork_checkpoint(sinusoidal_checkpoint, tmp_path_factory):
    """A checkpoint in the fork's layout: a transformer_lm_wiki103-named model config carrying
    the fork's max_tokens field, and the sinusoid buffer key decoder.embed_positions._float_tensor.
    Its weights come from a short run of the stock sinusoidal twin."""
    state = torch.load(sinusoidal_checkpoint, map_location="cpu", weights_only=False)
    state["cfg"]["model"]["_name"] = state["cfg"]["model"]["arch"] = "transformer_lm_wiki103"
    state["cfg"]["model"]["max_tokens"] = 1024
    state["model"]["decoder.embed_positions._float_tensor"] = torch.FloatTensor(1)
    path = tmp_path_factory.mktemp("fork") / "fork.pt"
    torch.save(state, path)
    return path
