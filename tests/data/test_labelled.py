"""The VADER sentiment loader, on a small archive built like the vaderSentiment 3.3.2 sdist (offline)."""

import io
import tarfile

import pytest

from hf_xfmr.data import labelled


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _lines(prefix: str, n: int) -> bytes:
    # CRLF line ends and ratings on both sides of the neutral band, like the real files.
    ratings = [-2.5, -1.2, -0.7, -0.1, 0.0, 0.4, 0.8, 1.0, 1.9, 3.1]
    return "".join(f"{prefix}{i}\t{ratings[i % 10]}\tsentence {prefix}{i} ok\r\n" for i in range(n)).encode()


def write_fake_vader_sdist(path, per_source: int = 200):
    """An archive laid out like vaderSentiment-3.3.2.tar.gz, with `per_source` rated lines per source."""
    inner = _tar_gz({f"hutto_ICWSM_2014/{name}": _lines(source[0], per_source)
                     for source, name in labelled.VADER_SOURCES.items()})
    path.write_bytes(_tar_gz({"vaderSentiment-3.3.2/LICENSE.txt": b"MIT",
                              f"vaderSentiment-3.3.2/{labelled._INNER_ARCHIVE}": inner}))
    return path


@pytest.fixture
def sdist(tmp_path):
    return write_fake_vader_sdist(tmp_path / labelled.VADER_SDIST)


def test_reads_every_source(sdist):
    rows = labelled.read_vader_ratings(sdist)
    assert len(rows) == 800
    assert rows[0] == {"id": "t0", "source": "tweets", "text": "sentence t0 ok", "rating": -2.5}
    assert {r["source"] for r in rows} == set(labelled.VADER_SOURCES)


def test_binary_labels_drop_the_neutral_band(sdist):
    data = labelled.load_vader_sentiment(sdist=sdist, neutral_margin=1.0)
    assert data["train"].features["label"].names == ["negative", "positive"]
    rows = [r for split in data.values() for r in split]
    assert len(rows) == 4 * 200 * 5 // 10  # ratings -2.5, -1.2, 1.0, 1.9, 3.1 of every ten
    assert all((r["label"] == 1) == (r["rating"] > 0) and abs(r["rating"]) >= 1.0 for r in rows)


def test_three_classes_keep_neutral(sdist):
    data = labelled.load_vader_sentiment(["movies"], sdist=sdist, num_classes=3, neutral_margin=0.5)
    rows = [r for split in data.values() for r in split]
    assert len(rows) == 200 and {r["source"] for r in rows} == {"movies"}
    by_label = {label: sorted({r["rating"] for r in rows if r["label"] == label}) for label in range(3)}
    assert by_label == {0: [-2.5, -1.2, -0.7], 1: [-0.1, 0.0, 0.4], 2: [0.8, 1.0, 1.9, 3.1]}


def test_splits_are_deterministic_disjoint_and_stable(sdist):
    first = labelled.load_vader_sentiment(sdist=sdist)
    again = labelled.load_vader_sentiment(sdist=sdist)
    assert {k: v["id"] for k, v in first.items()} == {k: v["id"] for k, v in again.items()}
    keys = {k: {(r["source"], r["id"]) for r in v} for k, v in first.items()}
    assert not (keys["train"] & keys["validation"] or keys["train"] & keys["test"] or keys["validation"] & keys["test"])
    assert 0.03 < len(keys["test"]) / sum(map(len, keys.values())) < 0.2
    # A sentence stays in its split when the label options change.
    three = labelled.load_vader_sentiment(sdist=sdist, num_classes=3)
    assert keys["test"] <= {(r["source"], r["id"]) for r in three["test"]}
    other_seed = labelled.load_vader_sentiment(sdist=sdist, seed=1)
    assert {(r["source"], r["id"]) for r in other_seed["test"]} != keys["test"]


def test_missing_archive_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv(labelled.VADER_ENV, str(tmp_path / "nothing.tar.gz"))
    with pytest.raises(FileNotFoundError, match=r"python -m hf_xfmr.data.labelled fetch"):
        labelled.load_vader_sentiment()


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_classes=5), "num_classes must be 2"),
    (dict(sources=["reddit"]), "Unknown VADER source"),
    (dict(validation_size=0.5, test_size=0.5), "leave some examples for training"),
    (dict(neutral_margin=0.0), "neutral_margin=0 leaves no neutral band"),
])
def test_bad_options(sdist, kwargs, message):
    with pytest.raises(ValueError, match=message):
        labelled.load_vader_sentiment(sdist=sdist, **kwargs)


def test_not_the_sdist(tmp_path):
    path = tmp_path / "other.tar.gz"
    path.write_bytes(_tar_gz({"x/readme.txt": b"hello"}))
    with pytest.raises(ValueError, match="not the vaderSentiment 3.3.2 sdist"):
        labelled.read_vader_ratings(path)
