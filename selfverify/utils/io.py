"""Record I/O shared across the project: tolerant JSONL/JSON reading and atomic writing.

Reading: :func:`read_records` yields ``(line_no, record)`` from a JSONL file or a JSON array (told
apart by the first non-space character). A malformed record (bad JSON, invalid UTF-8, not an object,
a line over ``max_line_bytes``) becomes a :class:`RecordError` naming the file and line: a warning on
stderr with ``on_error="skip"``, raised with ``on_error="fail"``. Lines are read with a size limit,
so a huge line costs at most ``max_line_bytes`` of memory. A JSON array is read whole (use JSONL for
big inputs) and cannot resynchronise after a syntax error: the rest of the array is then skipped.

Writing: :func:`atomic_write_text` / :func:`atomic_write_json` write a sibling temporary file and
``os.replace`` it over the target, so readers see the old or the new file, never half of one.
:class:`AtomicJsonlWriter` streams records to ``OUT.partial`` (one flushed line per record) and renames
it to ``OUT`` only on :meth:`~AtomicJsonlWriter.commit`; after a crash or an abort ``OUT`` is untouched
and ``OUT.partial`` holds the complete records written so far.
"""

from __future__ import annotations

import codecs
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal

from safetensors import SafetensorError

OnError = Literal["skip", "fail"]
Warn = Callable[["RecordError"], None]
MAX_LINE_BYTES = 64 * 2**20
_SKIP_CHUNK = 2**20


class SourceError(ValueError):
    """A model or dataset that cannot be loaded (no such directory, no hub, no such name)."""


class RecordError(ValueError):
    """A malformed input record, located by file and line (1-based)."""

    def __init__(self, path: str | os.PathLike[str], line_no: int, message: str) -> None:
        super().__init__(f"{path}:{line_no}: {message}")
        self.path = str(path)
        self.line_no = line_no
        self.message = message


def warn_stderr(err: RecordError) -> None:
    """The default ``warn``: one line on stderr."""
    print(f"warning: {err} (skipped)", file=sys.stderr)


def report_record_error(err: RecordError, on_error: OnError, warn: Warn | None = None) -> None:
    """Apply the error policy: raise ``err`` when ``on_error == "fail"``, else hand it to ``warn``."""
    if on_error == "fail":
        raise err
    (warn or warn_stderr)(err)


def read_records(
    path: str | os.PathLike[str],
    *,
    on_error: OnError = "skip",
    warn: Warn | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_no, record)`` for every JSON object in a JSONL file or a JSON array file.

    ``line_no`` is the 1-based line where the record starts. Blank lines are ignored. Malformed
    records are reported through :func:`report_record_error`. Raises ``OSError`` if the file cannot be
    opened.
    """
    if on_error not in ("skip", "fail"):
        raise ValueError(f"on_error must be 'skip' or 'fail', not {on_error!r}")
    with open(path, "rb") as f:
        head = f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
        while not head:  # leading whitespace longer than one read
            chunk = f.read(4096)
            if not chunk:
                return
            head = chunk.lstrip()
        f.seek(0)
        if head.startswith(b"["):
            yield from _read_json_array(f.read(), path, on_error, warn)
        else:
            yield from _read_jsonl(f, path, on_error, warn, max_line_bytes)


def _decode_object(raw: bytes, path: str | os.PathLike[str], line_no: int) -> dict[str, Any]:
    try:
        # Decoded here, not by json.loads, which would guess UTF-16/32 from the first bytes.
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordError(path, line_no, "not valid UTF-8") from None
    # json raises ValueError for bad syntax and for integers over Python's digit limit, and
    # RecursionError for very deep nesting.
    except (ValueError, RecursionError) as exc:
        raise RecordError(path, line_no, f"invalid JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise RecordError(path, line_no, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _read_jsonl(
    f: BinaryIO, path: str | os.PathLike[str], on_error: OnError, warn: Warn | None, max_line_bytes: int
) -> Iterator[tuple[int, dict[str, Any]]]:
    line_no = 0
    while raw := f.readline(max_line_bytes + 1):
        line_no += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            while (rest := f.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
                pass  # discard the rest of the oversized line without holding it
            report_record_error(
                RecordError(path, line_no, f"line longer than {max_line_bytes} bytes"), on_error, warn
            )
            continue
        if line_no == 1:
            # Only after the length check: stripped before it, the BOM hid a cut-off first line, whose
            # rest was then read as a line 2 (and yielded as a record when it was valid JSON).
            raw = raw.removeprefix(codecs.BOM_UTF8)
        if not raw.strip():
            continue
        try:
            record = _decode_object(raw, path, line_no)
        except RecordError as err:
            report_record_error(err, on_error, warn)
            continue
        yield line_no, record


def _read_json_array(
    data: bytes, path: str | os.PathLike[str], on_error: OnError, warn: Warn | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        message = "not valid UTF-8; rest of the file skipped"
        report_record_error(RecordError(path, line_no, message), on_error, warn)
        return
    decoder = json.JSONDecoder()
    cursor = [0, 1]  # a position and its line number; positions only move forward

    def line_at(pos: int) -> int:
        cursor[1] += text.count("\n", cursor[0], pos)
        cursor[0] = pos
        return cursor[1]

    pos = _skip_space(text, text.index("[") + 1)
    if text.startswith("]", pos):
        return
    while True:
        line_no = line_at(pos)
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            message = f"invalid JSON: {str(exc)[:200]}; rest of the array skipped"
            report_record_error(RecordError(path, line_no, message), on_error, warn)
            return
        if isinstance(obj, dict):
            yield line_no, obj
        else:
            message = f"expected a JSON object, got {type(obj).__name__}"
            report_record_error(RecordError(path, line_no, message), on_error, warn)
        pos = _skip_space(text, end)
        if text.startswith("]", pos):
            return
        if not text.startswith(",", pos):
            message = "expected ',' or ']' in the JSON array; rest of the array skipped"
            report_record_error(RecordError(path, line_at(pos), message), on_error, warn)
            return
        pos = _skip_space(text, pos + 1)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _temp_sibling(path: Path, suffix: str) -> Path:
    """A fresh name next to ``path`` (same filesystem, so ``os.replace`` is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a sibling temporary file, fsync, then ``os.replace``."""
    target = Path(path)
    tmp = _temp_sibling(target, ".tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` as JSON to ``path`` atomically, with a trailing newline."""
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str) + "\n")


def json_line(record: Mapping[str, Any]) -> bytes:
    """One JSONL line as UTF-8 bytes; non-JSON values become strings.

    Text that cannot be UTF-8 encoded (lone surrogates arrive through ``\\ud800`` escapes in the
    input) is written with ASCII escapes instead of failing.
    """
    line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(record, default=str) + "\n").encode("ascii")


class AtomicJsonlWriter:
    """Stream records to ``OUT.partial``, one flushed line each; :meth:`commit` renames it to ``OUT``.

    As a context manager a clean exit commits and an exception aborts: ``OUT`` (and any older copy of
    it) is left untouched and ``OUT.partial`` keeps the complete records written so far.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.partial_path = self.path.with_name(self.path.name + ".partial")
        self.count = 0
        self._file = open(self.partial_path, "wb")  # noqa: SIM115 - closed by commit()/abort()

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record; it is serialised first, so a failure never leaves half a line."""
        self._file.write(json_line(record))
        self._file.flush()
        self.count += 1

    def commit(self) -> Path:
        """Make the file durable and move it to ``OUT``; returns ``OUT``."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.partial_path, self.path)
        return self.path

    def abort(self) -> Path:
        """Stop writing and leave the records so far in ``OUT.partial``; returns that path."""
        self._file.close()
        return self.partial_path

    def __enter__(self) -> AtomicJsonlWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._file.closed:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (disk full, read-only); the previous one is left as it was."""


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Run ``write(tmp)`` into a fresh sibling directory, then swap it in for ``path``.

    A failed write (a full disk, a read-only directory) removes the partial copy, so it holds no space,
    and leaves ``path`` untouched. torch.save reports a failed write as RuntimeError and safetensors as
    its own error, hence the three kinds caught.
    """
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
    except (OSError, RuntimeError, SafetensorError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        detail = " ".join(str(err).split())[:300]
        raise CheckpointWriteError(
            f"could not write the checkpoint {path} ({detail}); the previous checkpoint is intact: "
            "make room (or make the run directory writable) and rerun the same command to resume"
        ) from err
    _swap_in(tmp, path)


def _swap_in(tmp: Path, path: Path) -> None:
    """Replace ``path`` by the finished ``tmp`` (``recover`` completes a swap a crash interrupted)."""
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)  # a kill during the last swap's clean-up can leave one
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def recover(path: Path) -> None:
    """Finish an interrupted ``write_atomically``: if only ``.old`` survived a crash, restore it."""
    old = path.with_name(path.name + ".old")
    if not path.exists() and old.exists():
        os.replace(old, path)
    shutil.rmtree(old, ignore_errors=True)
