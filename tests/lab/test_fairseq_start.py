"""A lab process imports fairseq without scikit-learn and scipy.stats, and what fairseq took from them
gives the real functions' answers (checked against the real modules, imported after)."""
import json
import subprocess
import sys

import pytest

from conftest import REPO

# Each runs a fresh interpreter that imports fairseq: in make test, not in make test-fast (under 3 minutes).
pytestmark = pytest.mark.slow

CHECK = """
import json, sys
import fairseq_alibi_lab, fairseq
loaded = [m for m in ("sklearn", "sklearn.metrics", "scipy.stats") if m in sys.modules]
from fairseq_alibi_lab.fairseq_start import DeferredModule
held = sorted([name, key] for name, module in list(sys.modules.items()) for key, value in vars(module).items()
              if isinstance(value, DeferredModule) or "fairseq_start" in str(getattr(value, "__doc__", None)))
from fairseq.criterions import sentence_prediction as sp
from fairseq.tasks import audio_classification as ac
y, p = [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]
deferred = [sp.f1_score(y, p), sp._matthews_corrcoef(y, p), list(sp.pearsonr([1, 2, 3, 5], [1, 2, 4, 4])),
            list(sp.spearmanr([1, 2, 3, 5], [1, 3, 2, 4])),
            [a.tolist() for a in ac.sklearn_metrics.roc_curve([0, 1, 1, 0], [0.1, 0.8, 0.4, 0.35])]]
import scipy.stats, sklearn.metrics
real = [sklearn.metrics.f1_score(y, p), sklearn.metrics.matthews_corrcoef(y, p),
        list(scipy.stats.pearsonr([1, 2, 3, 5], [1, 2, 4, 4])), list(scipy.stats.spearmanr([1, 2, 3, 5], [1, 3, 2, 4])),
        [a.tolist() for a in sklearn.metrics.roc_curve([0, 1, 1, 0], [0.1, 0.8, 0.4, 0.35])]]
print(json.dumps({"loaded": loaded, "held": held, "deferred": deferred, "real": real, "modules": [
    type(scipy.stats).__name__, type(sklearn.metrics).__name__],
    "finders": [type(f).__name__ for f in sys.meta_path], "loader_patched": "exec_module" in vars(fairseq.__spec__.loader)}))
"""


def test_a_lab_process_imports_fairseq_with_sklearn_and_scipy_stats_deferred_and_their_answers_kept():
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == []  # not imported by fairseq's import
    # what fairseq took from them, and nothing else took a stand-in (a fairseq that did would be seen here)
    assert seen["held"] == [["fairseq.criterions.sentence_prediction", name] for name in
                            ("_matthews_corrcoef", "f1_score", "pearsonr", "spearmanr")] + [
                               ["fairseq.tasks.audio_classification", "sklearn_metrics"]]
    assert seen["deferred"] == seen["real"]
    assert seen["modules"] == ["module", "module"]  # the real modules after, not DeferredModule
    assert "FairseqStart" not in seen["finders"] and not seen["loader_patched"]  # left as found


def test_modules_imported_before_fairseq_are_left_as_they_are():
    """A process that imported scipy.stats itself (the claims' t tests) keeps its module through fairseq's import."""
    check = ("import sys, scipy.stats; real = sys.modules['scipy.stats']; import fairseq_alibi_lab, fairseq; "
             "from fairseq.criterions import sentence_prediction as sp; "
             "print(sys.modules['scipy.stats'] is real, sp.pearsonr is real.pearsonr, 'sklearn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "False"]
