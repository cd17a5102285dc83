"""The operator verbs the web console offers: the CLI's, carried out by the same
admin functions, each recorded with "web", the person and their reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from saga import admin
from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError
from saga._internal.operator_identity import operator_source
from saga._internal.ports import EventRecord
from saga._internal.views import SagaView
from saga.web.markup import attr, page, path, short, text


@dataclasses.dataclass(frozen=True)
class Chosen:
    """What the confirmation form says: the step (verbs that name one), the reason, and
    the step's result as JSON text (``skip``)."""

    step: str
    reason: str
    result: str = "null"


Call = Callable[[Coordinator, str, Chosen], SagaView]  # coord, saga id, what the form says


@dataclasses.dataclass(frozen=True)
class Verb:
    """One action: its name (as the CLI spells it), what it does, whether it names a step
    (and a result for it)."""

    name: str
    label: str
    does: str
    call: Call
    needs_step: bool = False
    needs_result: bool = False
    records: str | None = None
    """The action's name in the history, when not ``name`` (``retry-from``: ``retry``)."""


VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        Verb("cancel", "cancel", "Stop the saga at its next step boundary and unwind it.",
             lambda c, i, _: admin.cancel(c, i)),
        Verb("compensate", "compensate", "Unwind the saga now (refused past its pivot).",
             lambda c, i, _: admin.compensate(c, i)),
        Verb("resume", "resume", "Carry the saga forward now (needs its definition: --app).",
             lambda c, i, _: admin.resume(c, i)),
        Verb("pause", "pause",
             "Hold the saga at its next step boundary, nothing compensated (resume goes on).",
             lambda c, i, _: admin.pause(c, i)),
        Verb("retry", "retry forward",
             "Run a saga that failed past its pivot forward again, once its cause is fixed: "
             "the failed step with a fresh attempt budget, then the rest.",
             lambda c, i, _: admin.retry(c, i)),
        Verb("retry-from", "retry from a step",
             "Run this step again, and every step after it, once you checked what it did "
             "(each of them that succeeded must be declared idempotent; never a pivot).",
             lambda c, i, f: admin.retry(c, i, f.step), needs_step=True, records="retry"),
        Verb("skip", "skip: done by hand",
             "Record that you did this failed step by hand, with the result it would have "
             "returned (JSON), then carry the saga forward.",
             lambda c, i, f: admin.skip(c, i, f.step, f.result, f.reason),
             needs_step=True, needs_result=True),
        Verb("retry-compensation", "retry compensation",
             "Run a failed saga's compensations again, with a fresh attempt budget.",
             lambda c, i, _: admin.retry_compensation(c, i)),
        Verb("mark-compensated", "mark compensated",
             "Record that you undid this step by hand, then unwind the rest.",
             lambda c, i, f: admin.mark_compensated(c, i, f.step, f.reason), needs_step=True),
        Verb("mark-step", "mark step did not happen",
             "Record that a step given up in doubt did not take effect (you checked).",
             lambda c, i, f: admin.mark_step(c, i, f.step, f.reason), needs_step=True),
    )
}  # fmt: skip


DONE_WITHIN = 60.0
"""How recent (database clock, seconds) the console's own record of an action must be
for the saga page to say it was done: the redirect after an action lands at once."""


def done_notice(verb_name: str | None, events: Sequence[EventRecord], now: float) -> str | None:
    """ "<verb>: done" when this saga's history holds the console's record of ``verb_name``
    from the last :data:`DONE_WITHIN` seconds; else None. The page's ``?done=`` only names
    what to look for: a link anyone can forge, so it never says "done" by itself."""
    verb = VERBS.get(verb_name or "")
    if verb is None:
        return None
    for event in reversed(events):
        detail = event.detail or {}
        if (
            event.kind == "operator_action"
            and detail.get("action") == (verb.records or verb.name)
            and detail.get("source") == "web"
            and now - event.at <= DONE_WITHIN
        ):
            return f"{verb.name}: done, recorded as an operator action"
    return None


def perform(
    coord: Coordinator, verb: Verb, saga_id: str, form: dict[str, str], client: str | None
) -> SagaView:
    """Carry out ``verb`` as the person named in ``form``, recording where it came from."""
    reason, user, step = (form.get(k, "").strip() for k in ("reason", "operator", "step"))
    if not user:
        raise ConfigurationError("say who you are (your name is recorded with the action)")
    if not reason:
        raise ConfigurationError("a reason is required; it is recorded with the action")
    if verb.needs_step and not step:
        raise ConfigurationError(f"{verb.name} needs the step it is about: choose one")
    if verb.name == "mark-step" and form.get("did_not_happen") != "1":
        raise ConfigurationError("say what happened to the step: tick 'did not happen'")
    source = {"source": "web", "by": user, "reason": reason, "client": client or "unknown"}
    chosen = Chosen(step, reason, form.get("result", "").strip() or "null")
    with operator_source(**source):
        return verb.call(coord, saga_id, chosen)


def confirm_page(view: SagaView, verb: Verb, csrf: str, error: str | None = None) -> str:
    """The confirmation step: what will happen, and the reason it needs."""
    step = ""
    if verb.needs_step:
        options = "".join(
            f'<option value="{attr(s.name)}">{text(s.name)} ({s.status.value})</option>'
            for s in view.steps
        )
        step = f'<label>step <select name="step" id="step">{options}</select></label><br>'
    if verb.needs_result:
        step += (
            '<label>its result (JSON) <input name="result" id="result" size="60" '
            'value="null"></label><br>'
        )
    if verb.name == "mark-step":
        step += (
            '<label><input type="checkbox" name="did_not_happen" value="1" id="did-not-happen"> '
            "the step's action did not happen (I checked)</label><br>"
        )
    problem = f'<p class="error" id="error">{text(error)}</p>' if error else ""
    body = (
        f"{problem}<h1>{text(verb.label)}: saga {short(view.id)} ({text(view.name)}, "
        f"{view.status.value})</h1><p>{text(verb.does)}</p>"
        f'<form method="post" action="{path("saga", view.id, "action", verb.name)}" '
        'id="confirm-form">'
        f'<input type="hidden" name="csrf" value="{attr(csrf)}">{step}'
        '<label>your name <input name="operator" id="operator" required></label><br>'
        '<label>reason (recorded) <input name="reason" id="reason" size="60" required></label><br>'
        f'<button type="submit" id="confirm">yes, {text(verb.label)}</button> '
        f'<a href="{path("saga", view.id)}">no, back</a></form>'
    )
    return page(f"confirm {text(verb.name)}", body)
