"""The operator verbs the web console offers: the CLI's, carried out by the same
admin functions, each recorded with "web", the person and their reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from saga import admin
from saga.coordinator import Coordinator
from saga.errors import ConfigurationError
from saga.operations import operator_source
from saga.views import SagaView
from saga.web.markup import attr, page, text

Call = Callable[[Coordinator, str, str, str], SagaView]  # coord, saga id, step, reason


@dataclasses.dataclass(frozen=True)
class Verb:
    """One action: its name (as the CLI spells it), what it does, whether it names a step."""

    name: str
    label: str
    does: str
    call: Call
    needs_step: bool = False


VERBS: dict[str, Verb] = {
    verb.name: verb
    for verb in (
        Verb("cancel", "cancel", "Stop the saga at its next step boundary and unwind it.",
             lambda c, i, _s, _r: admin.cancel(c, i)),
        Verb("compensate", "compensate", "Unwind the saga now (refused past its pivot).",
             lambda c, i, _s, _r: admin.compensate(c, i)),
        Verb("resume", "resume", "Carry the saga forward now (needs its definition: --app).",
             lambda c, i, _s, _r: admin.resume(c, i)),
        Verb("retry-compensation", "retry compensation",
             "Run a failed saga's compensations again, with a fresh attempt budget.",
             lambda c, i, _s, _r: admin.retry_compensation(c, i)),
        Verb("mark-compensated", "mark compensated",
             "Record that you undid this step by hand, then unwind the rest.",
             admin.mark_compensated, needs_step=True),
        Verb("mark-step", "mark step did not happen",
             "Record that a step given up in doubt did not take effect (you checked).",
             admin.mark_step, needs_step=True),
    )
}  # fmt: skip


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
    with operator_source(**source):
        return verb.call(coord, saga_id, step, reason)


def confirm_page(view: SagaView, verb: Verb, csrf: str, error: str | None = None) -> str:
    """The confirmation step: what will happen, and the reason it needs."""
    step = ""
    if verb.needs_step:
        options = "".join(
            f'<option value="{attr(s.name)}">{text(s.name)} ({s.status.value})</option>'
            for s in view.steps
        )
        step = f'<label>step <select name="step" id="step">{options}</select></label><br>'
    if verb.name == "mark-step":
        step += (
            '<label><input type="checkbox" name="did_not_happen" value="1" id="did-not-happen"> '
            "the step's action did not happen (I checked)</label><br>"
        )
    problem = f'<p class="error" id="error">{text(error)}</p>' if error else ""
    body = (
        f"{problem}<h1>{text(verb.label)}: saga {view.id[:8]} ({text(view.name)}, "
        f"{view.status.value})</h1><p>{text(verb.does)}</p>"
        f'<form method="post" action="saga/{view.id}/action/{verb.name}" id="confirm-form">'
        f'<input type="hidden" name="csrf" value="{attr(csrf)}">{step}'
        '<label>your name <input name="operator" id="operator" required></label><br>'
        '<label>reason (recorded) <input name="reason" id="reason" size="60" required></label><br>'
        f'<button type="submit" id="confirm">yes, {text(verb.label)}</button> '
        f'<a href="saga/{view.id}">no, back</a></form>'
    )
    return page(f"confirm {text(verb.name)}", body)
