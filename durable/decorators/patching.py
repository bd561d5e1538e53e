"""``durable.patched(id)``: change a workflow's code under runs in flight.

A run replays its workflow function from the start after every wait and
every crash, and the journal answers the calls it already made, position
by position; a call that differs from the journal is non-determinism
(`NonDeterminismError`). To change what a workflow calls while runs of
the old code are in flight, put the change behind a patch::

    if durable.patched("fraud-check"):
        await fraud_check(order)         # the new code
    await charge(order)                  # what old and new code both do

``patched(id)`` answers, once per run and id (later calls in the same run
return the first answer):

- **True** where the run reaches this point under code that has the patch:
  the live edge of the run (nothing journaled here or later). It journals
  a *patch marker* (an entry of kind ``patch`` named ``id``) at the next
  position, so every replay of the run answers True again.
- **True** on replay when the journal holds the marker ``id`` here.
- **False** on replay of a run that passed this point under code without
  the patch: the journal holds another call here (the old code's next
  step) or further on, and no marker. The run keeps to the old branch.

A marker takes a journal position, as Temporal's marker event does, and
it is durable before anything the run journals after it: it is written in
a commit of its own, made at the call, that every later commit of the
run follows in the store's log. Unlike a step, a marker is *stepped over*
by every other call: a step, wait or child run whose position holds a
marker takes the next one. So deleting a ``patched(id)`` call (once no run
that went down the old branch is left) shifts nothing in runs that
recorded its marker, and Temporal's intermediate ``deprecate_patch`` step
is not needed: see docs/versioning.md for the whole recipe.

``patched()`` outside a workflow, or inside a step's body, raises
`NotInWorkflow` naming it; an id that is not a non-empty str raises
`InvalidArgument`.
"""

from __future__ import annotations

from durable.decorators.context import current_run
from durable.decorators.journal import PATCH, Entry
from durable.decorators.suspend import Abort
from durable.errors import InvalidArgument

__all__ = ["patched"]


def patched(patch_id: str) -> bool:
    """True if this run takes the new code of patch ``patch_id``: it reached
    this point under code that has the patch (a marker is journaled, so
    replays answer True again); False on replay of a run that went past this
    point under the old code. The first answer holds for the whole run.

    Only in a workflow (`NotInWorkflow` elsewhere). See
    `durable.decorators.patching`.
    """
    run = current_run(f"durable.patched({patch_id!r})")
    if not isinstance(patch_id, str) or not patch_id:
        raise InvalidArgument(f"a patch id must be a non-empty str, got {patch_id!r}")
    known = run.patches.get(patch_id)
    if known is not None:
        return known
    markers = run.markers_from()
    if patch_id in markers:  # journaled by an earlier delivery of this run
        run.take_through(markers[patch_id])
        answer = True
    else:
        position = run.peek_position()
        if run.journal.last_position >= position:
            answer = False  # the old code went on from here: keep to its branch
        else:
            try:
                run.journal.mark(position, Entry(patch_id, PATCH, time=run.clock.now_ms()))
            except Exception as e:
                raise Abort(
                    f"run {run.run_id!r}: the marker of patch {patch_id!r} at position "
                    f"{position} could not be written: {e}",
                    e,
                ) from e
            run.take_through(position)
            answer = True
    run.patches[patch_id] = answer
    return answer
