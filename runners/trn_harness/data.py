"""Training data as fixed-shape numpy arrays: learnable synthetic sets and readers for local files.

Every array has a static shape (text padded to --seq-len, images resized) so XLA compiles each graph once.
Readers raise UsageError naming the file, the line and the fix; nothing here imports torch.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .config import UsageError

Arrays = dict[str, np.ndarray]
TEXT_LABEL_SUFFIXES = (".csv", ".tsv", ".jsonl")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def num_samples(arrays: Arrays) -> int:
    return len(next(iter(arrays.values())))


def take(arrays: Arrays, index: np.ndarray) -> Arrays:
    return {name: values[index] for name, values in arrays.items()}


def hold_out(arrays: Arrays, fraction: float, seed: int) -> tuple[Arrays, Arrays | None]:
    """Split off a deterministic, shuffled evaluation fraction."""
    n = num_samples(arrays)
    n_eval = int(n * fraction)
    if n_eval == 0:
        return arrays, None
    order = np.random.default_rng(seed).permutation(n)
    return take(arrays, order[n_eval:]), take(arrays, order[:n_eval])


# ---- synthetic sets: fixed shapes, and a signal a small model learns in tens of steps ----

# Token ids below this are reserved for special tokens (pad 0, unk 1, cls 2, sep 3, mask 4).
FIRST_ORDINARY_TOKEN = 5


def synthetic_classification_text(
    n: int, seq_len: int, vocab_size: int, num_labels: int, seed: int
) -> Arrays:
    """Token sequences whose class shows in which 'keyword' tokens they contain, padded to seq_len."""
    rng = np.random.default_rng(seed)
    ordinary = np.arange(FIRST_ORDINARY_TOKEN, vocab_size)
    # The same keywords for the train and eval sets, whatever their seeds.
    keywords = np.random.default_rng(1234).choice(ordinary, size=(num_labels, 4), replace=False)
    labels = rng.integers(0, num_labels, size=n)
    ids = np.zeros((n, seq_len), dtype=np.int64)
    mask = np.zeros((n, seq_len), dtype=np.int64)
    lengths = rng.integers(max(3, seq_len // 2), seq_len + 1, size=n)
    for i in range(n):
        body = rng.choice(ordinary, size=lengths[i] - 2)
        hits = rng.random(body.shape[0]) < 0.2
        body[hits] = rng.choice(keywords[labels[i]], size=int(hits.sum()))
        ids[i, : lengths[i]] = np.concatenate(([2], body, [3]))
        mask[i, : lengths[i]] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels.astype(np.int64)}


def synthetic_language_text(n: int, seq_len: int, vocab_size: int, seed: int) -> Arrays:
    """Counting sequences (next = previous + stride, wrapping) with a per-sequence stride: easy to learn."""
    rng = np.random.default_rng(seed)
    span = vocab_size - FIRST_ORDINARY_TOKEN
    starts = rng.integers(0, span, size=(n, 1))
    strides = rng.integers(1, 4, size=(n, 1))
    ids = FIRST_ORDINARY_TOKEN + (starts + strides * np.arange(seq_len)) % span
    return {"input_ids": ids.astype(np.int64), "attention_mask": np.ones((n, seq_len), dtype=np.int64)}


def synthetic_images(n: int, image_size: int, num_labels: int, seed: int) -> Arrays:
    """Images made of a per-class smooth pattern plus noise, normalised to about [-1, 1]."""
    rng = np.random.default_rng(seed)
    pattern_rng = np.random.default_rng(1234)  # same class patterns for the train and eval sets
    coarse = pattern_rng.normal(size=(num_labels, 3, 4, 4)).astype(np.float32)
    reps = -(-image_size // 4)
    patterns = np.kron(coarse, np.ones((1, 1, reps, reps), dtype=np.float32))[:, :, :image_size, :image_size]
    labels = rng.integers(0, num_labels, size=n)
    noise = rng.normal(scale=0.8, size=(n, 3, image_size, image_size)).astype(np.float32)
    images = np.tanh(0.7 * patterns[labels] + noise).astype(np.float32)
    return {"pixel_values": images, "labels": labels.astype(np.int64)}


# ---- local files ----


def read_text_label_file(path: Path, text_column: str, label_column: str) -> tuple[list[str], list[str]]:
    """Texts and raw labels from CSV, TSV or JSONL; errors name the line."""
    if path.suffix.lower() not in TEXT_LABEL_SUFFIXES:
        raise UsageError(f"--data {path}: unsupported file type; give a .csv, .tsv or .jsonl file")
    texts: list[str] = []
    labels: list[str] = []
    for line_no, record in _records(path):
        missing = [c for c in (text_column, label_column) if c not in record]
        if missing:
            flag = "--text-column" if missing[0] == text_column else "--label-column"
            raise UsageError(
                f"{path} line {line_no}: no column {missing[0]!r} (columns: {', '.join(map(str, record))}); "
                f"pass {flag} NAME"
            )
        texts.append(str(record[text_column]))
        labels.append(str(record[label_column]).strip())
    if not texts:
        raise UsageError(f"--data {path}: the file has no records")
    return texts, labels


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            if path.suffix.lower() == ".jsonl":
                for line_no, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise UsageError(
                            f"{path} line {line_no}: not valid JSON ({exc.msg}); fix or remove the line"
                        ) from None
                    if not isinstance(record, dict):
                        raise UsageError(f"{path} line {line_no}: expected a JSON object with text and label")
                    yield line_no, record
            else:
                delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
                reader = csv.DictReader(handle, delimiter=delimiter)
                for record in reader:
                    if None in record or None in record.values():
                        raise UsageError(
                            f"{path} line {reader.line_num}: wrong number of fields; quote text that holds "
                            f"{'tabs' if delimiter == chr(9) else 'commas'}"
                        )
                    yield reader.line_num, record
    except UnicodeDecodeError:
        raise UsageError(f"--data {path}: not UTF-8 text; convert the file to UTF-8") from None


def label_ids(raw: list[str], num_labels: int, path: Path) -> np.ndarray:
    """Integer class ids, each checked against --num-labels."""
    ids = np.empty(len(raw), dtype=np.int64)
    for i, text in enumerate(raw):
        value = _as_int(text)
        if value is None:
            raise UsageError(
                f"{path}: label {text!r} of record {i + 1} is not an integer class id; "
                f"use ids 0..{num_labels - 1}"
            )
        if not 0 <= value < num_labels:
            raise UsageError(
                f"{path}: label {value} of record {i + 1} is out of range for --num-labels {num_labels}; "
                f"use ids 0..{num_labels - 1} or raise --num-labels"
            )
        ids[i] = value
    return ids


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def read_text_corpus(path: Path) -> list[str]:
    """Documents from a .txt file (blank-line separated) or a directory of .txt files."""
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    if not files:
        raise UsageError(f"--data {path}: no .txt files in the directory")
    documents: list[str] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"--data {file}: not UTF-8 text; convert the file to UTF-8") from None
        documents.extend(doc.strip() for doc in text.split("\n\n") if doc.strip())
    if not documents:
        raise UsageError(f"--data {path}: no text found")
    return documents


def read_images(path: Path, image_size: int, num_labels: int) -> tuple[Arrays, list[str]]:
    """A folder of class sub-folders of images, or an .npz with `images` and `labels`."""
    if path.is_dir():
        return _read_image_folder(path, image_size, num_labels)
    if path.suffix.lower() == ".npz":
        return _read_npz(path, image_size, num_labels), []
    raise UsageError(f"--data {path}: give a folder of class sub-folders of images or an .npz file")


def _read_image_folder(path: Path, image_size: int, num_labels: int) -> tuple[Arrays, list[str]]:
    from PIL import Image, UnidentifiedImageError

    classes = sorted(d.name for d in path.iterdir() if d.is_dir())
    if not classes:
        raise UsageError(f"--data {path}: no class sub-folders; put each class's images in its own folder")
    if len(classes) > num_labels:
        raise UsageError(
            f"--data {path}: {len(classes)} class folders but --num-labels {num_labels}; "
            f"pass --num-labels {len(classes)}"
        )
    images, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted((path / name).iterdir()):
            if file.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            try:
                with Image.open(file) as image:
                    rgb = image.convert("RGB").resize((image_size, image_size), Image.BILINEAR)
            except (UnidentifiedImageError, OSError):
                raise UsageError(f"--data {file}: not a readable image; remove or replace it") from None
            images.append(np.asarray(rgb, dtype=np.uint8))
            labels.append(label)
    if not images:
        raise UsageError(f"--data {path}: no images ({', '.join(IMAGE_SUFFIXES)}) in the class folders")
    pixels = np.stack(images).transpose(0, 3, 1, 2)
    return {"pixel_values": _normalise(pixels), "labels": np.asarray(labels, dtype=np.int64)}, classes


def _read_npz(path: Path, image_size: int, num_labels: int) -> Arrays:
    try:
        archive = np.load(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--data {path}: not a readable .npz file ({exc})") from None
    if "images" not in archive or "labels" not in archive:
        raise UsageError(
            f"--data {path}: needs arrays 'images' and 'labels' (has {', '.join(archive.files)})"
        )
    images, labels = archive["images"], archive["labels"].astype(np.int64).reshape(-1)
    if images.ndim != 4 or len(images) != len(labels):
        raise UsageError(
            f"--data {path}: 'images' must be N x H x W x C or N x C x H x W with one label per image "
            f"(got images {images.shape}, labels {labels.shape})"
        )
    if images.shape[-1] in (1, 3) and images.shape[1] not in (1, 3):
        images = images.transpose(0, 3, 1, 2)
    if images.shape[1] == 1:
        images = np.repeat(images, 3, axis=1)
    bad = np.flatnonzero((labels < 0) | (labels >= num_labels))
    if bad.size:
        raise UsageError(
            f"--data {path}: label {labels[bad[0]]} of image {bad[0]} is out of range for --num-labels "
            f"{num_labels}; use ids 0..{num_labels - 1} or raise --num-labels"
        )
    if images.shape[2:] != (image_size, image_size):
        images = _resize(images, image_size)
    return {"pixel_values": _normalise(images), "labels": labels}


def _resize(images: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    as_uint8 = images if images.dtype == np.uint8 else np.clip(images * 255, 0, 255).astype(np.uint8)
    out = [
        np.asarray(Image.fromarray(img.transpose(1, 2, 0)).resize((size, size), Image.BILINEAR))
        for img in as_uint8
    ]
    return np.stack(out).transpose(0, 3, 1, 2)


def _normalise(pixels: np.ndarray) -> np.ndarray:
    scaled = pixels.astype(np.float32) / (255.0 if pixels.dtype == np.uint8 else 1.0)
    return ((scaled - 0.5) / 0.5).astype(np.float32)
