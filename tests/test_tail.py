"""Following a growing file: whole lines only, resumable, and safe when the file is cut short."""

from __future__ import annotations

from pathlib import Path

from trnconsole.core.tail import FileTail


def append(path: Path, data: str | bytes) -> None:
    with path.open("ab") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def test_a_file_that_does_not_exist_yet_reads_as_nothing(tmp_path: Path) -> None:
    tail = FileTail(tmp_path / "stdout.log")
    assert tail.read_lines() == []
    assert tail.offset == 0
    append(tmp_path / "stdout.log", "first\n")
    assert tail.read_lines() == ["first"]


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    append(path, 'one\ntwo\n{"t": 1.0, "ki')
    tail = FileTail(path)
    assert tail.read_lines() == ["one", "two"]
    assert tail.offset == len("one\ntwo\n")
    assert tail.read_lines() == []
    append(path, 'nd": "step"}\n')
    assert tail.read_lines() == ['{"t": 1.0, "kind": "step"}']
    assert tail.read_lines() == []


def test_a_saved_offset_resumes_where_the_last_reader_stopped(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    append(path, "a\nb\n")
    first = FileTail(path)
    assert first.read_lines() == ["a", "b"]
    append(path, "c\n")
    resumed = FileTail(path, offset=first.offset)
    assert resumed.read_lines() == ["c"]


def test_a_truncated_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    append(path, "old line one\nold line two\n")
    tail = FileTail(path)
    assert len(tail.read_lines()) == 2
    path.write_text("new\n")
    assert tail.read_lines() == ["new"]
    assert tail.offset == 4


def test_a_large_append_comes_back_whole_over_several_bounded_reads(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    lines = [f"LOG line {i} " + "x" * (i % 50) for i in range(20_000)]
    append(path, "\n".join(lines) + "\n")
    tail = FileTail(path)
    got: list[str] = []
    reads = 0
    while batch := tail.read_lines(max_bytes=64 * 1024):
        got += batch
        reads += 1
    assert got == lines
    assert reads > 5
    assert tail.offset == path.stat().st_size


def test_invalid_utf8_is_replaced_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    append(path, b"ok \xff\xfe bytes\n\xc3\xa9t\xc3\xa9\n")
    assert FileTail(path).read_lines() == ["ok \ufffd\ufffd bytes", "été"]


def test_a_line_longer_than_a_read_comes_back_in_pieces_without_splitting_a_character(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    line = "é" * 1000  # two bytes each
    append(path, line + "\nnext\n")
    tail = FileTail(path)
    pieces: list[str] = []
    while batch := tail.read_lines(max_bytes=301):
        pieces += batch
    assert pieces[-1] == "next"
    assert "".join(pieces[:-1]) == line
    assert all(len(piece) <= 150 for piece in pieces)


def test_carriage_returns_stay_in_the_line_for_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    append(path, " 10%|#\r 20%|##\r\nLOG x\n")
    assert FileTail(path).read_lines() == [" 10%|#\r 20%|##\r", "LOG x"]


def test_with_frames_a_bar_still_being_drawn_is_read_up_to_its_last_frame_start(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    append(path, "start\n\r 10%|# 1/10\r 20%|## 2/10")  # tqdm writes "\r" + frame: the last may be half done
    tail = FileTail(path)
    assert tail.read_lines(frames=True) == ["start", "\r 10%|# 1/10\r"]
    assert tail.open
    assert tail.read_lines(frames=True) == []
    append(path, "\r 30%|### 3/10\r100%|########## 10/10\n")
    assert tail.read_lines(frames=True) == [" 20%|## 2/10\r 30%|### 3/10\r100%|########## 10/10"]
    assert not tail.open


def test_with_frames_a_crlf_line_end_is_not_cut_in_half(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    append(path, "LOG one\r\nLOG two\r")
    tail = FileTail(path)
    assert tail.read_lines(frames=True) == ["LOG one\r"]
    assert not tail.open
    append(path, "\n")
    assert tail.read_lines(frames=True) == ["LOG two\r"]
    assert not tail.open
