"""Labelled data for finetuning: sentiment classification on the VADER human-rated sentences.

The VADER paper (Hutto & Gilbert, 2014, "VADER: A Parsimonious Rule-based Model for Sentiment Analysis
of Social Media Text", ICWSM-14) collected sentiment ratings from about 20 human raters for ~23,700
English sentences from four sources, each rated from -4 (extremely negative) to +4 (extremely
positive). The ratings ship in the MIT-licensed `vaderSentiment` *source distribution* on PyPI
(`additional_resources/hutto_ICWSM_2014.tar.gz`), but not in its wheel, so `fetch_vader_sentiment`
downloads the sdist once with pip (`make install`/`make demo` do it); everything after that is offline.

| source  | file in the archive                  | sentences |
|---------|--------------------------------------|-----------|
| tweets  | tweets_GroundTruth.txt               | 4,200     |
| movies  | movieReviewSnippets_GroundTruth.txt  | 10,605    |
| amazon  | amazonReviewSnippets_GroundTruth.txt | 3,708     |
| nyt     | nytEditorialSnippets_GroundTruth.txt | 5,190     |

`load_vader_sentiment` turns the mean ratings into labels (2 classes: negative / positive, dropping the
sentences whose |rating| is below `neutral_margin`; 3 classes: negative / neutral / positive) and splits
them deterministically: each sentence's split is a hash of its source, id and `seed`, so it does not move
when other options (sources, classes, margin) change.
"""

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

VADER_VERSION = "3.3.2"
VADER_SDIST = f"vaderSentiment-{VADER_VERSION}.tar.gz"
VADER_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
VADER_ENV = "HF_XFMR_VADER_SDIST"  # points at the sdist when it lives somewhere else
VADER_SOURCES = {
    "tweets": "tweets_GroundTruth.txt",
    "movies": "movieReviewSnippets_GroundTruth.txt",
    "amazon": "amazonReviewSnippets_GroundTruth.txt",
    "nyt": "nytEditorialSnippets_GroundTruth.txt",
}
_INNER_ARCHIVE = "additional_resources/hutto_ICWSM_2014.tar.gz"
FETCH_COMMAND = "python -m hf_xfmr.data.labelled fetch"


def default_vader_path() -> Path:
    """Where `fetch_vader_sentiment` stores the sdist: `$HF_XFMR_VADER_SDIST`, else inside the running
    environment (`<sys.prefix>/share/hf_xfmr/`, i.e. `.venv/share/hf_xfmr/` for `make`)."""
    if os.environ.get(VADER_ENV):
        return Path(os.environ[VADER_ENV])
    return Path(sys.prefix) / "share" / "hf_xfmr" / VADER_SDIST


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_vader_sentiment(dest: str | os.PathLike | None = None, *, quiet: bool = True) -> Path:
    """Download the `vaderSentiment` sdist from PyPI with pip (once) and return its path.

    dest: the file to write; default `default_vader_path()`. Nothing is downloaded when a file with the
    expected sha256 is already there. Needs access to PyPI (or the index pip is configured with).
    """
    dest = Path(dest) if dest is not None else default_vader_path()
    if dest.is_file() and _sha256(dest) == VADER_SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The sdist (not the wheel) holds the ratings: --no-binary forces it; --no-deps skips nltk etc.
    command = [sys.executable, "-m", "pip", "download", f"vaderSentiment=={VADER_VERSION}", "--no-binary", ":all:",
               "--no-deps", "--dest", str(dest.parent)] + (["--quiet"] if quiet else [])
    result = subprocess.run(command, capture_output=True, text=True)
    downloaded = dest.parent / VADER_SDIST
    if result.returncode != 0 or not downloaded.is_file():
        raise RuntimeError(
            f"Could not download {VADER_SDIST} from PyPI (`{' '.join(command)}` exited with {result.returncode}):\n"
            f"{result.stderr.strip()[-2000:]}\nDownload it by hand from https://pypi.org/project/vaderSentiment/"
            f"{VADER_VERSION}/#files and set {VADER_ENV} to its path."
        )
    if _sha256(downloaded) != VADER_SHA256:
        downloaded.unlink()
        raise RuntimeError(f"{VADER_SDIST} from the package index does not have the expected sha256 {VADER_SHA256}.")
    if downloaded != dest:
        downloaded.replace(dest)
    return dest


def _missing_message(path: Path) -> str:
    return (
        f"The VADER ratings are not installed: {path} does not exist. They ship in the vaderSentiment source "
        f"distribution on PyPI; fetch it once with `{FETCH_COMMAND}` (or `make install`), or set {VADER_ENV} "
        f"to a downloaded {VADER_SDIST}."
    )


def read_vader_ratings(sdist: str | os.PathLike | None = None, sources=None) -> list[dict]:
    """Every rated sentence of the chosen sources as {"id", "source", "text", "rating"} dicts, read
    straight from the sdist (the inner archive is opened in memory; nothing is extracted).

    sdist: the `vaderSentiment-3.3.2.tar.gz` file; default `default_vader_path()`.
    sources: names from `VADER_SOURCES` (default: all four).
    """
    path = Path(sdist) if sdist is not None else default_vader_path()
    if not path.is_file():
        raise FileNotFoundError(_missing_message(path))
    sources = list(VADER_SOURCES) if sources is None else list(sources)
    unknown = [s for s in sources if s not in VADER_SOURCES]
    if unknown or not sources:
        raise ValueError(f"Unknown VADER source(s) {unknown or sources}; choose from {', '.join(VADER_SOURCES)}.")
    try:
        with tarfile.open(path, "r:gz") as outer:
            member = next((m for m in outer.getmembers() if m.name.endswith(_INNER_ARCHIVE)), None)
            if member is None:
                raise ValueError(f"{path} holds no {_INNER_ARCHIVE}: it is not the vaderSentiment {VADER_VERSION} "
                                 "sdist.")
            inner_bytes = outer.extractfile(member).read()
    except tarfile.TarError as err:
        raise ValueError(f"{path} is not a readable .tar.gz archive ({err}); fetch it again with `{FETCH_COMMAND}`.")
    rows = []
    with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
        names = {Path(m.name).name: m for m in inner.getmembers()}
        for source in sources:
            file_name = VADER_SOURCES[source]
            if file_name not in names:
                raise ValueError(f"{path} lacks {file_name}: it is not the vaderSentiment {VADER_VERSION} sdist.")
            text = inner.extractfile(names[file_name]).read().decode("utf-8")
            for line_no, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                parts = line.split("\t")
                if len(parts) != 3:
                    raise ValueError(f"{file_name} line {line_no}: expected 'id<TAB>rating<TAB>text', got "
                                     f"{line[:80]!r}.")
                rows.append({"id": parts[0], "source": source, "text": parts[2].strip(), "rating": float(parts[1])})
    return rows


def _split_of(row: dict, seed: int, validation_size: float, test_size: float) -> str:
    """A split from a hash of (seed, source, id): uniform, deterministic and independent of the other rows."""
    key = f"{seed}/{row['source']}/{row['id']}".encode()
    u = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64  # uniform in [0, 1)
    if u < test_size:
        return "test"
    if u < test_size + validation_size:
        return "validation"
    return "train"


def load_vader_sentiment(sources=None, *, num_classes: int = 2, neutral_margin: float = 1.0,
                         validation_size: float = 0.1, test_size: float = 0.1, seed: int = 0,
                         sdist: str | os.PathLike | None = None):
    """The VADER human-rated sentences as a sentiment `datasets.DatasetDict` (train / validation / test).

    Args:
        sources: which sentence sources (`VADER_SOURCES`: tweets, movies, amazon, nyt); default all four.
        num_classes: 2 (negative, positive; sentences with |rating| < neutral_margin are dropped) or
            3 (negative, neutral, positive; neutral when |rating| < neutral_margin).
        neutral_margin: mean rating (scale -4..4) below which, in absolute value, a sentence is neutral.
        validation_size, test_size: fractions of the sentences in those splits (the rest is train).
        seed: changes the split assignment.
        sdist: the `vaderSentiment-3.3.2.tar.gz` file; default `default_vader_path()`.

    Columns: text (str), label (ClassLabel), rating (float, the mean human rating), source (str), id (str).
    """
    import datasets

    if num_classes not in (2, 3):
        raise ValueError(f"num_classes must be 2 (negative/positive) or 3 (with neutral), got {num_classes}.")
    if not 0 <= neutral_margin <= 4:
        raise ValueError(f"neutral_margin must be in [0, 4] (ratings run from -4 to +4), got {neutral_margin}.")
    if num_classes == 2 and neutral_margin == 0:
        raise ValueError("neutral_margin=0 leaves no neutral band to drop for num_classes=2; use e.g. 0.5 or 1.0.")
    if validation_size < 0 or test_size < 0 or validation_size + test_size >= 1:
        raise ValueError(f"validation_size ({validation_size}) and test_size ({test_size}) must be >= 0 and "
                         "leave some examples for training (sum < 1).")
    names = ["negative", "positive"] if num_classes == 2 else ["negative", "neutral", "positive"]
    splits = {"train": [], "validation": [], "test": []}
    for row in read_vader_ratings(sdist, sources):
        rating = row["rating"]
        if abs(rating) < neutral_margin:
            if num_classes == 2:
                continue
            label = 1
        else:
            label = 0 if rating < 0 else num_classes - 1
        splits[_split_of(row, seed, validation_size, test_size)].append({**row, "label": label})
    features = datasets.Features({
        "text": datasets.Value("string"), "label": datasets.ClassLabel(names=names),
        "rating": datasets.Value("float64"), "source": datasets.Value("string"), "id": datasets.Value("string"),
    })
    return datasets.DatasetDict({
        name: datasets.Dataset.from_list(rows, features=features) for name, rows in splits.items() if rows
    })


def vader_unlabelled_text(sources=None, *, validation_size: float = 0.1, test_size: float = 0.1, seed: int = 0,
                          sdist: str | os.PathLike | None = None) -> list[str]:
    """In-domain text for pretraining before finetuning on `load_vader_sentiment`: the sentences of its
    train split (same `sources`, `validation_size`, `test_size` and `seed`), ratings dropped.

    Every rating is kept, the neutral sentences that a 2-class split leaves out too (no label is used), and
    never a validation or test sentence: a train sentence whose text also occurs in one of those splits (the
    same snippet rated twice) is left out as well. In file order (source by source)."""
    rows = read_vader_ratings(sdist, sources)
    train = [_split_of(row, seed, validation_size, test_size) == "train" for row in rows]
    held_out = {row["text"] for row, is_train in zip(rows, train) if not is_train}
    return [row["text"] for row, is_train in zip(rows, train) if is_train and row["text"] not in held_out]


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hf_xfmr.data.labelled",
        description="The VADER human-rated sentiment sentences (MIT, from the vaderSentiment sdist on PyPI).")
    parser.add_argument("action", choices=("fetch", "info"),
                        help="fetch: download the sdist once (needs PyPI); info: show where it is and the split sizes")
    parser.add_argument("--dest", default=None, help=f"file to write/read (default: {default_vader_path()})")
    args = parser.parse_args(argv)
    if args.action == "fetch":
        print(f"VADER ratings: {fetch_vader_sentiment(args.dest)}")
        return 0
    dataset = load_vader_sentiment(sdist=args.dest)
    for name, split in dataset.items():
        labels = list(split["label"])
        counts = [labels.count(i) for i in range(2)]
        print(f"{name}: {len(split)} sentences ({counts[0]} negative, {counts[1]} positive)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
