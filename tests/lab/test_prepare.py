"""scripts/prepare-wikitext.sh offline: loopback HTTP, file:// URLs, local files, bad downloads."""
import functools
import http.server
import os
import re
import subprocess
import tarfile
import threading
import zipfile

import pytest

from conftest import REPO, find_wikitext2, snapshot

pytestmark = pytest.mark.slow
FILES = ["wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"]


def prepare(tmp_path, *source):
    env = dict(os.environ, DATA_BIN=str(tmp_path / "data-bin"), RAW_DIR=str(tmp_path / "raw"))
    return subprocess.run(["scripts/prepare-wikitext.sh", "2", *map(str, source)], cwd=REPO, env=env,
                          capture_output=True, text=True)


def make_zip(path, corrupt=False):
    """A wikitext-2-v1.zip laid out as the published one (wikitext-2/wiki.*.tokens)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name in FILES:
            data = open(os.path.join(find_wikitext2(), name), "rb").read()
            if corrupt and name == "wiki.valid.tokens":
                data = data[:1000] + b"X" + data[1001:]
            z.writestr(f"wikitext-2/{name}", data)
    return path


@pytest.fixture
def http_server(tmp_path):
    """Serve tmp_path/www on a loopback port."""
    (tmp_path / "www").mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "www"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "www"
    server.shutdown()


def test_download_over_http_verifies_binarizes_and_skips_on_rerun(tmp_path, http_server):
    url, www = http_server
    make_zip(www / "wikitext-2-v1.zip")
    proc = prepare(tmp_path, f"{url}/wikitext-2-v1.zip")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "checksums" in proc.stdout and "verified" in proc.stdout
    out = tmp_path / "data-bin" / "wikitext-2"
    assert {"dict.txt", "train.bin", "valid.bin", "test.bin"} <= set(os.listdir(out))
    # WikiText-2's 33,277 training words, less <unk>, which fairseq keeps among its special symbols
    assert len((out / "dict.txt").read_text().splitlines()) == 33277 - 1
    again = prepare(tmp_path, f"{url}/wikitext-2-v1.zip")
    assert again.returncode == 0 and "already prepared" in again.stdout


def test_corrupted_download_is_rejected_with_a_clear_message(tmp_path):
    archive = make_zip(tmp_path / "wikitext-2-v1.zip", corrupt=True)
    proc = prepare(tmp_path, f"file://{archive}")
    assert proc.returncode == 1
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("error: ") and "wiki.valid.tokens has sha256" in message and "corrupt" in message
    assert not (tmp_path / "data-bin" / "wikitext-2").exists()


def test_local_tar_gz_and_directory_are_accepted(tmp_path):
    archive = tmp_path / "wikitext-2.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for name in FILES:
            tar.add(os.path.join(find_wikitext2(), name), arcname=f"wikitext-2/{name}")
    proc = prepare(tmp_path, archive)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "raw" / "wikitext-2" / "wiki.test.tokens").exists()
    # a directory is used in place (and a prepared data-bin is not redone)
    assert "already prepared" in prepare(tmp_path, find_wikitext2()).stdout


def test_not_an_archive_is_rejected(tmp_path):
    (tmp_path / "broken.zip").write_bytes(b"<html>403 Forbidden</html>")
    proc = prepare(tmp_path, tmp_path / "broken.zip")
    assert proc.returncode == 1 and "not a readable zip archive" in proc.stderr


def test_a_source_that_is_the_output_directory_is_left_untouched(tmp_path):
    """Giving data-bin/wikitext-2 itself as SOURCE once wiped the corpus after its checksums passed."""
    out = tmp_path / "data-bin" / "wikitext-2"
    out.mkdir(parents=True)
    for name in FILES:
        (out / name).write_bytes(open(os.path.join(find_wikitext2(), name), "rb").read())
    before = snapshot(out)
    proc = prepare(tmp_path, out)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "exists but is no finished preparation" in proc.stderr.strip().splitlines()[-1]
    assert snapshot(out) == before


def test_extraction_never_replaces_an_existing_raw_directory(tmp_path):
    raw = tmp_path / "raw" / "wikitext-2"
    raw.mkdir(parents=True)
    (raw / "notes.txt").write_text("mine")
    archive = make_zip(tmp_path / "wikitext-2-v1.zip")
    proc = prepare(tmp_path, archive)
    assert proc.returncode == 1 and "exists without wiki.train.tokens" in proc.stderr
    assert (raw / "notes.txt").read_text() == "mine"


def test_the_tests_fetch_wikitext2_as_make_experiment_does(tmp_path, monkeypatch):
    """Outside this workspace (no shared copy) the tests get WikiText-2 through prepare-wikitext.sh,
    here from a file:// URL standing in for the mirror."""
    import conftest

    archive = make_zip(tmp_path / "wikitext-2-v1.zip")
    expected = {name: open(os.path.join(find_wikitext2(), name), "rb").read() for name in FILES}
    monkeypatch.setattr(conftest, "SHARED_WIKITEXT2", str(tmp_path / "nowhere"))
    monkeypatch.delenv("WIKITEXT2_DIR", raising=False)
    for name, value in [("WIKITEXT2_SOURCE", f"file://{archive}"), ("RAW_DIR", str(tmp_path / "raw")),
                        ("DATA_BIN", str(tmp_path / "bin"))]:
        monkeypatch.setenv(name, value)
    found = conftest.find_wikitext2.__wrapped__()
    assert found == str(tmp_path / "raw" / "wikitext-2")
    assert snapshot(found) == {os.path.join(found, name): data for name, data in expected.items()}


def test_a_users_directory_that_differs_is_refused_without_asking_to_delete_it(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in FILES:
        data = open(os.path.join(find_wikitext2(), name), "rb").read()
        (mine / name).write_bytes(data.replace(b" the ", b" a ", 1) if name == "wiki.test.tokens" else data)
    files = snapshot(mine)
    proc = prepare(tmp_path, mine)
    message = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "wiki.test.tokens has sha256" in message and "give SOURCE" in message
    assert "delete" not in message and "move" not in message and snapshot(mine) == files


def test_documents_binarizes_separated_copies_beside_the_usual_corpus(tmp_path):
    """--documents: data-bin/wikitext-2-documents, with <doc> in the dictionary and one line of it
    between articles; the raw files are left as they were and nothing else is made."""
    env = dict(os.environ, DATA_BIN=str(tmp_path / "data-bin"), RAW_DIR=str(tmp_path / "raw"))
    raw = snapshot(find_wikitext2())
    proc = subprocess.run(["scripts/prepare-wikitext.sh", "--documents", "2", find_wikitext2()], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp_path / "data-bin" / "wikitext-2-documents"
    assert os.listdir(tmp_path / "data-bin") == ["wikitext-2-documents"] and not (tmp_path / "raw").exists()
    assert (out / ".prepared").exists() and not (out / "text").exists()  # the separated copies are gone
    counts = dict(re.findall(r"wiki\.(\w+)\.tokens: (\d+) articles", proc.stdout))
    # level-1 headings after an empty line (docs/documents.md): one <doc> line between each two
    assert counts == {"train": "601", "valid": "60", "test": "60"}, proc.stdout
    assert "<doc> 600" in (out / "dict.txt").read_text().splitlines()
    assert snapshot(find_wikitext2()) == raw
