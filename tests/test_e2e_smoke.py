from __future__ import annotations

from pathlib import Path

import pytest

from mcp_client import ERAS, Era, run, session


@pytest.mark.parametrize("era", ERAS)
def test_smoke(tmp_path: Path, era: Era) -> None:
    (tmp_path / "a.txt").write_text("hello\n")

    async def main() -> None:
        async with session(str(tmp_path), era=era) as s:
            assert await s.text("read_text_file", path="a.txt") == "hello\n"
            tools = await s.client.list_tools()
            assert len(tools.tools) == 20
            print(s.client.protocol_version)

    run(main)
