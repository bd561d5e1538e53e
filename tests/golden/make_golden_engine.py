"""Write the golden files of the engine's records, format version 1 (run once per format).

    python tests/golden/make_golden_engine.py

Never regenerate an existing version's files: they pin what older releases
wrote, and the tests check that this code still reads them.
"""

from __future__ import annotations

from pathlib import Path

from durable.engine import (
    RunOutcome,
    RunRecord,
    RunResultRecord,
    RunTermination,
    StepErrorKind,
    StepPointer,
    TerminalRecord,
    TerminalStatus,
    encode_run_outcome,
    encode_run_record,
    encode_run_result,
    encode_step_pointer,
    encode_terminal_record,
    input_digest,
)

HERE = Path(__file__).parent / "v1"

RUN_RECORD = RunRecord(
    run_id="01HZX3B2W3R8R8R8R8R8R8R8R8",
    input_sha256=input_digest(b"hello"),
    submitted_at_ms=1_700_000_000_000,
    headers={"callback_url": "https://example.com/hook", "tenant": "t-1"},
    cancel_requested=True,
)
STEP_POINTER = StepPointer(step_number=3, job_id="01HZX3B2W3R8R8R8R8R8R8R8R9")
TERMINATION = RunTermination(
    status=TerminalStatus.FAILED,
    final_step=3,
    terminated_at_ms=1_700_000_060_000,
    error="card declined",
    error_kind=StepErrorKind.PERMANENT,
)
TERMINAL_RECORD = TerminalRecord(TERMINATION, input_sha256=input_digest(b"hello"))
RUN_OUTCOME = RunOutcome(
    run_id="01HZX3B2W3R8R8R8R8R8R8R8R8",
    status=TerminalStatus.SUCCEEDED,
    final_step=2,
    result=b"\x00result\xff",
    headers={"tenant": "t-1"},
)
RUN_RESULT = RunResultRecord(
    RunTermination(TerminalStatus.SUCCEEDED, final_step=2, terminated_at_ms=1_700_000_030_000),
    RUN_OUTCOME,
)

#: File name -> (the value, its bytes as the current writer encodes them).
FILES = {
    "engine_run_record.bin": (RUN_RECORD, lambda: encode_run_record(RUN_RECORD)),
    "engine_step_pointer.bin": (STEP_POINTER, lambda: encode_step_pointer(STEP_POINTER)),
    "engine_terminal_record.bin": (
        TERMINAL_RECORD,
        lambda: encode_terminal_record(TERMINAL_RECORD),
    ),
    "engine_run_outcome.bin": (RUN_OUTCOME, lambda: encode_run_outcome(RUN_OUTCOME)),
    "engine_run_result.bin": (RUN_RESULT, lambda: encode_run_result(RUN_RESULT)),
}


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for name, (_, encode) in FILES.items():
        path = HERE / name
        if path.exists():  # a released format is never rewritten
            continue
        path.write_bytes(encode())


if __name__ == "__main__":
    main()
