"""Reading tools end to end, through the SDK client, in both protocol eras."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import mcp_types as types
import pytest

from helpers import CANARY, Tree
from mcp_client import ERAS, Era, run, session
from unprivileged import nobody_command, nobody_pythonpath


@pytest.mark.parametrize("era", ERAS)
def test_read_text_file_whole_head_and_tail(tree: Tree, era: Era) -> None:
    (tree.root / "five.txt").write_text("l1\nl2\nl3\nl4\nl5\n")
    (tree.root / "nonl.txt").write_text("a\nb\nc")
    (tree.root / "crlf.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    (tree.root / "bad.txt").write_bytes(b"ok \xff\xfe here\n")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            assert await s.text("read_text_file", path="five.txt") == "l1\nl2\nl3\nl4\nl5\n"
            assert await s.text("read_text_file", path="five.txt", head=2) == "l1\nl2\n"
            assert await s.text("read_text_file", path="five.txt", tail=2) == "l4\nl5\n"
            assert await s.text("read_text_file", path="five.txt", tail=1) == "l5\n"
            assert await s.text("read_text_file", path="five.txt", head=0) == ""
            assert await s.text("read_text_file", path="five.txt", tail=0) == ""
            assert (
                await s.text("read_text_file", path="five.txt", head=99) == "l1\nl2\nl3\nl4\nl5\n"
            )
            assert (
                await s.text("read_text_file", path="five.txt", tail=99) == "l1\nl2\nl3\nl4\nl5\n"
            )
            assert await s.text("read_text_file", path="nonl.txt", tail=1) == "c"
            assert await s.text("read_text_file", path="nonl.txt", tail=2) == "b\nc"
            assert await s.text("read_text_file", path="crlf.txt") == "a\r\nb\r\nc\r\n"
            assert await s.text("read_text_file", path="crlf.txt", tail=1) == "c\r\n"
            assert await s.text("read_text_file", path="bad.txt") == "ok \ufffd\ufffd here\n"
            both = await s.error("read_text_file", path="five.txt", head=1, tail=1)
            assert "Cannot specify both head and tail" in both
            negative = await s.error("read_text_file", path="five.txt", head=-1)
            assert "head" in negative
            assert await s.text("read_file", path="five.txt", head=1) == "l1\n"
            result = await s.call("read_text_file", path="five.txt", head=1)
            assert result.structured_content["content"] == "l1\n"
            assert result.structured_content["revision"].startswith("sha256:")

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_read_errors_name_only_the_requested_path(tree: Tree, era: Era) -> None:
    (tree.root / "dir").mkdir()
    (tree.root / "escape").symlink_to(tree.outside / "secret.txt")
    os.mkfifo(tree.root / "fifo")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            missing = await s.error("read_text_file", path="missing.txt")
            assert "missing.txt" in missing and "ENOENT" in missing
            outside = await s.error("read_text_file", path=str(tree.outside / "secret.txt"))
            assert outside.startswith("Access denied")
            escaped = await s.error("read_text_file", path="escape")
            assert "Access denied" in escaped
            for message in (outside, escaped):
                assert str(tree.root) not in message  # the allow-list is never revealed
                assert "secret" not in message.replace(str(tree.outside / "secret.txt"), "")
            assert "EISDIR" in await s.error("read_text_file", path="dir")
            assert "Not a regular file" in await s.error("read_text_file", path="fifo")
            assert CANARY.decode() not in escaped

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_read_media_file_blocks(tree: Tree, era: Era) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 8
    (tree.root / "img.PNG").write_bytes(png)
    (tree.root / "sound.wav").write_bytes(b"RIFF....WAVE")
    (tree.root / "doc.pdf").write_bytes(b"%PDF-1.4")
    (tree.root / "blob").write_bytes(b"\0\1\2")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            image = (await s.call("read_media_file", path="img.PNG")).content[0]
            assert isinstance(image, types.ImageContent)
            assert image.mime_type == "image/png"
            assert base64.b64decode(image.data) == png
            audio = (await s.call("read_media_file", path="sound.wav")).content[0]
            assert isinstance(audio, types.AudioContent) and audio.mime_type == "audio/wav"
            pdf = (await s.call("read_media_file", path="doc.pdf")).content[0]
            assert isinstance(pdf, types.EmbeddedResource)
            assert isinstance(pdf.resource, types.BlobResourceContents)
            assert pdf.resource.mime_type == "application/pdf"
            assert str(pdf.resource.uri) == (tree.root / "doc.pdf").as_uri()
            blob = (await s.call("read_media_file", path="blob")).content[0]
            assert isinstance(blob, types.EmbeddedResource)
            assert blob.resource.mime_type == "application/octet-stream"
            assert base64.b64decode(blob.resource.blob) == b"\0\1\2"  # type: ignore[union-attr]
            assert "Access denied" in await s.error(
                "read_media_file", path=str(tree.outside / "secret.txt")
            )

    run(main)


@pytest.mark.parametrize("era", ERAS)
def test_read_multiple_files_reports_failures_inline(tree: Tree, era: Era) -> None:
    (tree.root / "a.txt").write_text("alpha\n")
    (tree.root / "b.txt").write_text("beta")

    async def main() -> None:
        async with session(str(tree.root), era=era) as s:
            outside = str(tree.outside / "secret.txt")
            result = await s.call(
                "read_multiple_files", paths=["a.txt", "missing", outside, "b.txt"]
            )
            assert not result.is_error
            text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
            parts = text.split("\n---\n")
            assert parts[0] == "a.txt:\nalpha\n\n"
            assert parts[1].startswith("missing: Error - ENOENT")
            assert parts[2].startswith(f"{outside}: Error - Access denied")
            assert parts[3] == "b.txt:\nbeta\n"
            files = result.structured_content["files"]  # type: ignore[index]
            assert files[0]["content"] == "alpha\n" and files[0]["path"] == "a.txt"
            assert files[1]["error"]["code"] == "ENOENT"
            assert "paths" in await s.error("read_multiple_files", paths=[])

    run(main)


def test_large_files_are_read_in_parts(tree: Tree) -> None:
    big = tree.root / "big.log"
    with big.open("wb") as f:
        f.truncate(1 << 40)  # a sparse 1 TiB file
        f.seek((1 << 40) - 12)
        f.write(b"\ntail line\n\n")

    async def main() -> None:
        async with session(str(tree.root), "--max-read-bytes", "1048576") as s:
            refused = await s.error("read_text_file", path="big.log")
            assert "head" in refused and "tail" in refused
            assert await s.text("read_text_file", path="big.log", tail=2) == "tail line\n\n"
            too_long = await s.error("read_text_file", path="big.log", head=5)
            assert "larger than" in too_long

    run(main)


def test_read_as_an_ordinary_user(public_tree: Tree) -> None:
    tree = public_tree
    tree.root.chmod(0o755)
    (tree.root / "public.txt").write_text("public\n")
    (tree.root / "private.txt").write_text("private\n")
    (tree.root / "private.txt").chmod(0o600)
    locked = tree.root / "locked"
    locked.mkdir()
    (locked / "inner.txt").write_text("x")
    locked.chmod(0o700)
    pythonpath = nobody_pythonpath()

    async def main() -> None:
        async with session(
            command=nobody_command(str(tree.root)), env={"PYTHONPATH": pythonpath}
        ) as s:
            assert await s.text("read_text_file", path="public.txt") == "public\n"
            assert "EACCES" in await s.error("read_text_file", path="private.txt")
            found = await s.text("search_files", path=".", pattern="**/*.txt")
            assert str(tree.root / "public.txt") in found
            assert "Search incomplete" in found and "locked (EACCES)" in found
            await s.text("write_file", path="new.txt", content="made by nobody")

    tree.root.chmod(0o777)
    run(main)
    assert (tree.root / "new.txt").stat().st_uid == 65534
    assert Path(tree.root / "new.txt").read_text() == "made by nobody"
