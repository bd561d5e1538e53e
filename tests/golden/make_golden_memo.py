"""Write the golden file of a memo entry, format version 1 (run once per format).

    python tests/golden/make_golden_memo.py

Never regenerate an existing version's files.
"""

from __future__ import annotations

from pathlib import Path

from durable.engine.memo_codec import encode_entry

HERE = Path(__file__).parent / "v1"
MEMO_KEY = "model-call:7"
MEMO_VALUE = {"text": "hello", "tokens": [1, 2, 3], "raw": b"\x00\xff", "score": 0.5}


def main() -> None:
    path = HERE / "memo_entry.bin"
    if not path.exists():
        path.write_bytes(encode_entry(MEMO_KEY, MEMO_VALUE)[0])


if __name__ == "__main__":
    main()
