"""The smaller pages: the diff of two sagas, the login form, an error."""

from __future__ import annotations

from saga._internal.views import StepView
from saga.admin import SagaDiff, human_duration, input_digest, total_duration
from saga.web.markup import attr, page, path, short, table, text


def diff_page(diff: SagaDiff) -> str:
    """What ``saga diff`` says, as a page."""
    sides = "".join(
        f'<tr><th>{label}</th><td><a href="{path("saga", view.id)}">{short(view.id)}</a></td>'
        f"<td>{text(view.name)}</td><td>{text(view.key)}</td><td>{view.status.value}</td>"
        f"<td><code>{input_digest(view)[:12]}</code></td>"
        f"<td>{text(human_duration(total_duration(view)))}</td></tr>"
        for label, view in (("left", diff.left), ("right", diff.right))
    )
    head = table(("", "id", "name", "key", "status", "input digest", "duration"), [sides])
    same = "the same input" if diff.same_input else "different input"
    rows = [
        f'<tr class="step-diff" data-step="{attr(d.name)}" '
        f'data-same-output="{_word(d.same_output)}">'
        f"<td>{text(d.name)}</td><td>{_side(d.left)}</td><td>{_side(d.right)}</td>"
        f"<td>{_word(d.same_input)}</td><td>{_word(d.same_output)}</td>"
        f"<td>{_delta(d.duration_delta)}</td></tr>"
        for d in diff.steps
    ]
    steps = table(("step", "left", "right", "same input", "same output", "Δ duration"), rows)
    body = f'<h1>Diff</h1>{head}<p id="same-input">{same}</p>{steps}'
    return page("diff", body)


def _side(step: StepView | None) -> str:
    if step is None:
        return "did not run"
    return f"{step.status.value} (attempt {step.attempt}, {text(human_duration(step.duration))})"


def _word(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _delta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    sign = "+" if seconds >= 0 else "-"
    return f"{sign}{text(human_duration(abs(seconds)))}"


def login_page(error: str | None = None, next_path: str = "/") -> str:
    problem = f'<p class="error" id="error">{text(error)}</p>' if error else ""
    body = (
        f"{problem}<h1>Token required</h1>"
        '<form method="post" action="login" id="login-form">'
        f'<input type="hidden" name="next" value="{attr(next_path)}">'
        '<label>token <input type="password" name="token" id="token" required></label> '
        '<button type="submit" id="login">sign in</button></form>'
    )
    return page("sign in", body)


def error_page(message: str) -> str:
    return page(
        "error", f'<p class="error" id="error">{text(message)}</p><a href="./">all sagas</a>'
    )
