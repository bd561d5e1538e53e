"""Who acquires the store: the rule, as a pure function of what was read.

A member that does not own the store acquires it when:

- it was started with ``takeover=True`` (operators: it fences the owner at
  once, whatever the chain says);
- the chain is empty (the first worker of a store acquires at once);
- the owner the chain names is gone: released (the newest version names
  nobody), dead or gone by `Liveness`, the member itself (it lost the
  store and knows it), or it let go of the host's owner lock
  (``owner_let_go_lock``) -- *and* no other standby with a lower id is
  alive or unknown (so only the lowest-id live standby acquires; an unknown
  one, seen but not yet seen change, may be alive, so it is waited for until
  it proves alive, or dead after the ttl). A member whose latest record
  says it owns the store while the chain names another is no standby: a
  former owner that died owning (its litter must not make a successor wait
  a ttl) or that is about to step down (then the chain's create-if-absent
  settles any race).

Statuses come from reads made just before the decision (`Liveness` judges
by the latest observation), so no decision rests on a stale read; two
members that decide to acquire at once race on the chain's create-if-absent
and exactly one wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from durable.cluster.chain import ChainVersion, Reason
from durable.cluster.members import Status

__all__ = ["Decision", "decide"]

_MAY_BE_ALIVE = frozenset({Status.ALIVE, Status.UNKNOWN})


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to acquire (and the chain reason to write), with why, for logs."""

    acquire: bool
    reason: Reason | None
    why: str


def decide(
    me: str,
    head: ChainVersion | None,
    statuses: Mapping[str, Status],
    *,
    takeover: bool = False,
    owner_let_go_lock: bool = False,
    owning: AbstractSet[str] = frozenset(),
) -> Decision:
    """Should member ``me``, not owning the store, acquire it now?

    ``head`` is the newest chain version just read (None: the chain is
    empty); ``statuses`` the liveness of the members just observed (the
    named owner and every member with an id below ``me``; a member missing
    from it counts as unknown); ``owner_let_go_lock`` that ``me`` just got
    the host's owner lock which the named owner's latest record says it
    held on this host; ``owning`` the members whose latest record says
    they own the store (never candidates).
    """
    if takeover:
        return Decision(True, Reason.TAKEOVER, "takeover=True: fencing the owner at once")
    if head is None:
        return Decision(True, Reason.START, "the owner chain is empty: first worker")
    owner = head.owner
    if owner is None:
        gone, reason = f"released at version {head.version}", Reason.HANDOVER
    elif owner == me:
        gone, reason = f"named owner {me} is this member, which lost the store", Reason.TAKEOVER
    elif owner_let_go_lock:
        gone, reason = f"owner {owner} let go of the host's owner lock", Reason.TAKEOVER
    else:
        status = statuses.get(owner, Status.UNKNOWN)
        if status in _MAY_BE_ALIVE:
            return Decision(False, None, f"owner {owner} is {status.value}")
        gone, reason = f"owner {owner} is {status.value}", Reason.TAKEOVER
    lower = sorted(
        m
        for m, s in statuses.items()
        if m < me and m != owner and m not in owning and s in _MAY_BE_ALIVE
    )
    if lower:
        first = lower[0]
        return Decision(
            False, None, f"{gone}; member {first} ({statuses[first].value}) has a lower id"
        )
    return Decision(True, reason, gone)
