"""Each rule on snippets that have the pitfall (right rule, step, line, tensors, numbers) and on
correct code (no diagnostic at all). Real engine traces; torch as the oracle for bytes."""

from __future__ import annotations

import pytest
from diagnostics_support import code_of, graph_storages, named_tensors, namespace, run, variable_storages

from app.diagnostics import diagnose
from app.schema import DeltaTrace
from app.trace.delta import compress
from app.units import fmt_bytes

# ---- graph-kept-by-container ---------------------------------------------------------------------

LOSSES = """
w = torch.randn(128, requires_grad=True)
losses = []
for i in range(4):
    x = torch.randn(128)
    loss = (w * x).sigmoid().sum()
    losses.append(loss)
"""


def retained_by(code: str, container: str) -> int:
    """Bytes alive only because ``container`` holds its tensors, measured on live torch objects."""
    ns = namespace(code_of(code))
    everything = named_tensors(ns)
    others = named_tensors({k: v for k, v in ns.items() if k != container})
    alive = {**graph_storages(everything), **variable_storages(everything)}
    kept = {**graph_storages(others), **variable_storages(others)}
    return sum(n for ptr, n in alive.items() if ptr not in kept)


def chart_figures(r, d) -> list[tuple[str, int]]:  # noqa: ANN001
    """("2,320 bytes", step) pairs a message quotes from the memory chart (steps as the page counts)."""
    import re

    found = re.findall(r"(\S+ (?:bytes|KiB|MiB|GiB)) at step (\d+)", d.message)
    return [(size, int(step)) for size, step in found]


def test_list_of_losses_reports_the_growth_the_chart_draws() -> None:
    r = run(LOSSES)
    d = r.only("graph-kept-by-container")
    assert (d.severity, d.line, r.step_line(d)) == ("warning", 6, 6)
    assert d.step == max(i for i, s in enumerate(r.result.steps) if s.line == 6)  # the last append
    assert r.names(d) == {"losses[0]", "losses[1]", "losses[2]"}  # the old iterations' graphs
    # torch's own count: each old iteration keeps its loss, its x and its sigmoid output
    assert retained_by(LOSSES, "losses") == 3 * (4 + 2 * 128 * 4)
    assert d.bytes == 4 + 2 * 128 * 4  # the growth per iteration, read off the chart
    figures = chart_figures(r, d)
    assert len(figures) == 2 and figures[-1][1] == d.step + 1
    for size, step in figures:  # the text and the chart agree, step by step
        assert size == fmt_bytes(r.memory[step - 1].total_bytes)
    assert "holds 4 graphs" in d.message
    assert "`losses.append(loss.item())`" in d.fix
    assert [(p.start, p.end, p.text) for p in d.patch] == [(6, 6, "    losses.append(loss.item())")]
    assert r.rules == ["graph-kept-by-container"]


def test_losses_kept_after_backward_are_a_warning_too() -> None:
    """backward() freed what the graphs saved, but every graph's nodes and its loss stay: still growth."""
    r = run("""
        model = nn.Linear(64, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step in range(4):
            loss = model(torch.randn(8, 64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
    """)
    d = r.only("graph-kept-by-container")
    assert (d.severity, d.line, d.bytes) == ("warning", 9, 4)  # one more scalar loss per iteration


def test_dict_of_outputs_is_a_container_too() -> None:
    r = run("""
        w = torch.randn(8, requires_grad=True)
        outs = {}
        for i in range(3):
            outs[i] = (w * i).exp()
    """)
    d = r.only("graph-kept-by-container")
    assert d.line == 4 and "torch.no_grad()" in d.fix  # no backward ever uses them
    assert d.patch[0].text == "    with torch.no_grad():\n        outs[i] = (w * i).exp()"


@pytest.mark.parametrize("fix", ["losses.append(loss.item())", "losses.append(loss.detach())"])
def test_list_of_numbers_or_detached_tensors_is_fine(fix: str) -> None:
    assert run(LOSSES.replace("losses.append(loss)", fix)).diagnostics == []


def test_predictions_under_no_grad_are_fine() -> None:
    r = run("""
        model = nn.Linear(3, 2)
        preds = []
        for i in range(3):
            with torch.no_grad():
                preds.append(model(torch.randn(3)))
    """)
    assert r.diagnostics == []


# ---- graph-chained-across-iterations -------------------------------------------------------------

def test_running_total_of_loss_tensors_chains_the_graphs() -> None:
    r = run("""
        w = torch.randn(50, requires_grad=True)
        total = 0
        for i in range(4):
            x = torch.randn(50)
            loss = (w * x).sigmoid().sum()
            total = total + loss
    """)
    d = r.only("graph-chained-across-iterations")
    assert d.line == 6 and r.names(d) == {"total"} and "`total = total + loss.item()`" in d.fix
    assert d.bytes == 2 * 50 * 4  # per iteration: an old x and a sigmoid output, saved by the graph
    for size, step in chart_figures(r, d):
        assert size == fmt_bytes(r.memory[step - 1].total_bytes)


def test_a_state_carried_across_iterations_is_cut_at_the_top_of_the_loop() -> None:
    r = run("""
        w = torch.ones(3, requires_grad=True)
        x = w * 2
        for i in range(4):
            x = x.clone()
            x = x * 1.5
    """)
    d = r.only("graph-chained-across-iterations")  # one cause, one finding (two lines rebuild x)
    assert d.line == 4 and "`x = x.detach()`" in d.fix and "total" not in d.fix
    assert [(p.start, p.end, p.text) for p in d.patch] == [(4, 3, "    x = x.detach()")]


@pytest.mark.parametrize("line", ["total = total + loss.item()", "total += loss.detach()"])
def test_running_total_of_numbers_is_fine(line: str) -> None:
    r = run(f"""
        w = torch.randn(50, requires_grad=True)
        total = 0
        for i in range(4):
            loss = (w * torch.randn(50)).sigmoid().sum()
            {line}
    """)
    assert r.diagnostics == []


def test_accumulating_then_one_backward_is_fine() -> None:
    r = run("""
        w = torch.randn(50, requires_grad=True)
        total = 0
        for i in range(4):
            total = total + (w * torch.randn(50)).sigmoid().sum()
        total.backward()
    """)
    assert r.diagnostics == []


# ---- saved-tensor-modified -----------------------------------------------------------------------

def test_saved_output_modified_in_place_predicts_the_backward_failure() -> None:
    r = run("""
        x = torch.randn(3, requires_grad=True)
        y = x.sigmoid()
        y.mul_(2)
        z = y.sum()
        z.backward()
    """)
    d = r.only("saved-tensor-modified")
    assert (d.severity, d.line, r.step_line(d), d.lines) == ("error", 3, 3, [2])
    # Predicted at the step of the write, two lines before backward() raised.
    assert r.result.error is not None and r.result.error.line == 5 and d.step == 2
    assert r.names(d) == {"y"}
    assert "SigmoidBackward0" in d.message and "version counter went from 0 to 1" in d.message
    assert "`y = y.mul(2)`" in d.fix and "It does: backward() at line 5" in d.message


def test_a_weight_the_optimizer_changed_under_a_retained_graph_offers_one_fix_as_a_sentence() -> None:
    """``opt.step()`` writes nothing the user could clone: the old graph backward() reached is
    ``h``'s, carried into the next iteration, and its cut is the one fix (test_diagnostics_advice
    checks in torch that it runs)."""
    r = run("""
        W = torch.randn(4, 4, requires_grad=True)
        opt = torch.optim.SGD([W], lr=0.1)
        h = torch.zeros(4)
        for t in range(3):
            h = torch.tanh(W @ h + 1)
            opt.zero_grad()
            h.sum().backward(retain_graph=True)
            opt.step()
    """)
    d = r.only("saved-tensor-modified")
    assert d.severity == "error" and r.result.error is not None
    assert d.fix.startswith("Cut what is carried at the start of each iteration: `h = h.detach()`")
    assert ".clone()" not in d.fix and [p.text for p in d.patch] == ["    h = h.detach()"]


def test_prediction_without_backward_is_a_note() -> None:
    """The run ended without going back through that graph: worth knowing, not a program gone wrong."""
    r = run("""
        w = torch.randn(3, requires_grad=True)
        h = w.exp()
        h += 1
    """)
    d = r.only("saved-tensor-modified")
    assert (d.severity, d.line) == ("info", 3) and "will therefore fail" in d.message


def test_an_optimizer_step_after_the_last_backward_is_fine() -> None:
    """Every training loop leaves a graph whose saved weights the last step changes: never used again."""
    r = run("""
        critic = nn.Linear(3, 1)
        opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
        x = torch.randn(5, 3, requires_grad=True)
        out = critic(x).sum()
        g, = torch.autograd.grad(out, x, create_graph=True)
        penalty = (g.norm(dim=1) - 1).pow(2).mean()
        penalty.backward()
        opt.step()
    """)
    assert r.diagnostics == []


def test_modifying_a_clone_of_a_saved_tensor_is_fine() -> None:
    r = run("""
        x = torch.randn(3, requires_grad=True)
        y = x.sigmoid()
        y2 = y.clone()
        y2.mul_(2)
        y2.sum().backward()
    """)
    assert r.diagnostics == []


# ---- inplace-through-detached-alias --------------------------------------------------------------

def test_write_through_a_named_detach_alias_changes_the_original() -> None:
    r = run("""
        x = torch.randn(4, requires_grad=True)
        y = x.detach()
        y.zero_()
    """)
    d = r.only("inplace-through-detached-alias")
    assert (d.severity, d.line, r.names(d)) == ("warning", 3, {"x", "y"})
    assert "`y = x.detach().clone()`" in d.fix
    ns = namespace(r.code)
    assert ns["x"].abs().sum().item() == 0  # torch agrees: x was zeroed through y


def test_write_through_data_into_a_saved_tensor_is_silent_and_wrong() -> None:
    r = run("""
        x = torch.randn(3, requires_grad=True)
        s = x.sigmoid()
        s.data.mul_(0)
        s.sum().backward()
    """)
    assert r.result.ok  # torch raises nothing ...
    d = r.only("inplace-through-detached-alias")
    assert (d.severity, d.line, r.names(d)) == ("error", 3, {"s"})
    assert "silently" in d.message and "SigmoidBackward0" in d.message


def test_detach_alias_into_saved_tensor_also_predicts_failure() -> None:
    r = run("""
        x = torch.tensor([1., 2., 3.], requires_grad=True)
        y = x.exp()
        alias = y.detach()
        alias.zero_()
        y.sum().backward()
    """)
    d = r.only("saved-tensor-modified")  # one cause, one finding: the alias is explained in it
    assert r.rules == ["saved-tensor-modified"] and d.line == 4
    assert "`alias = y.detach().clone()`" in d.fix and "detach() alias" in d.message
    assert [(p.start, p.text) for p in d.patch] == [(3, "alias = y.detach().clone()")]


@pytest.mark.parametrize("update", [
    "with torch.no_grad():\n    w -= 0.1 * w.grad",
    "w.data -= 0.1 * w.grad",
    "w.data.add_(-0.1 * w.grad)",
])
def test_manual_parameter_updates_are_fine(update: str) -> None:
    r = run("w = torch.randn(3, requires_grad=True)\nx = torch.randn(3)\nfor i in range(2):\n"
            "    loss = (w * x).sum() ** 2\n    loss.backward()\n"
            + "".join(f"    {line}\n" for line in update.split("\n")) + "    w.grad = None\n")
    assert r.result.ok and r.diagnostics == []


# ---- grad-stays-none -----------------------------------------------------------------------------

def test_a_parameter_cut_off_the_loss_is_a_warning_at_the_cutting_line() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        b = torch.randn(3, requires_grad=True)
        u = torch.randn(3, requires_grad=True)
        opt = torch.optim.SGD([w, b, u], lr=0.1)
        x = torch.randn(3)
        pred = w * x
        with torch.no_grad():
            h = u * 2
        loss = ((pred.detach() - x) ** 2).sum() + (b * x).sum() + (h * x).sum()
        loss.backward()
        opt.step()
    """)
    found = {frozenset(r.names(d)) & {"w", "u"}: d for d in r.diagnostics}
    assert set(found) == {frozenset({"w"}), frozenset({"u"})}
    cut, no_grad = found[frozenset({"w"})], found[frozenset({"u"})]
    assert {(d.rule, d.severity) for d in r.diagnostics} == {("grad-stays-none", "warning")}
    assert (cut.line, cut.lines) == (9, [10]) and "calls `.detach()`" in cut.message
    assert "((pred - x) ** 2).sum()" in cut.fix
    assert (no_grad.line, no_grad.lines) == (8, [10]) and "no_grad" in no_grad.message
    assert r.step_line(cut) == 9 and r.step_line(no_grad) == 8  # each goes to the step that cut
    ns = namespace(r.code)  # torch agrees on who got a gradient
    assert [ns[n].grad is None for n in "wbu"] == [True, False, True]


def test_a_cut_outside_what_the_optimizer_trains_is_quiet() -> None:
    r = run("""
        early = nn.Linear(3, 2)
        head = nn.Linear(2, 1)
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        feat = early(torch.randn(2, 3)).detach()
        head(feat).sum().backward()
        opt.step()
    """)
    assert r.diagnostics == []


@pytest.mark.parametrize("code", [
    # two problems solved one after the other: w2 gets its gradient from the second backward()
    "w1 = torch.randn(3, requires_grad=True)\nw2 = torch.randn(3, requires_grad=True)\n"
    "(w1 * 2).sum().backward()\n(w2 * 3).sum().backward()\n",
    # autograd.grad's input needs requires_grad, never a .grad
    "w = torch.randn(3, requires_grad=True)\nx = torch.randn(3, requires_grad=True)\n"
    "g, = torch.autograd.grad((w * x).sum(), x, create_graph=True)\n((g ** 2).sum()).backward()\n",
    # backward(inputs=...) fills only the leaves it names
    "a = torch.randn(3, requires_grad=True)\nb = torch.randn(3, requires_grad=True)\n"
    "torch.autograd.backward((a * b).sum(), inputs=[a])\n",
    # a training loop: every parameter gets a gradient; zero_grad() then empties it again
    "model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx, y = torch.randn(16, 4), torch.randn(16, 1)\n"
    "for step in range(3):\n    opt.zero_grad()\n    loss = F.mse_loss(model(x), y)\n"
    "    loss.backward()\n    opt.step()\nopt.zero_grad()\n",
])
def test_leaves_that_get_their_gradient_are_fine(code: str) -> None:
    r = run(code)
    assert r.result.ok and r.diagnostics == []


# ---- nonleaf-grad-read ---------------------------------------------------------------------------

def test_reading_grad_of_a_non_leaf() -> None:
    r = run("""
        x = torch.randn(3, requires_grad=True)
        h = x * 3
        y = (h ** 2).sum()
        y.backward()
        print(h.grad, x.grad)
    """)
    # torch's own warning, from the snippet: in its output, where a plain run prints it (stderr)
    printed = r.result.steps[-1].stdout
    assert "<snippet>:5: UserWarning: The .grad attribute of a Tensor that is not a leaf" in printed
    d = r.only("nonleaf-grad-read")
    assert (d.line, d.lines, r.names(d)) == (5, [2], {"h"})
    assert "`h.retain_grad()`" in d.fix and "MulBackward0" in d.message
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        ns = namespace(r.code)
    assert ns["h"].is_leaf is False and ns["x"].grad is not None


def test_retain_grad_and_leaf_grad_reads_are_fine() -> None:
    r = run("""
        x = torch.randn(3, requires_grad=True)
        h = x * 3
        h.retain_grad()
        (h ** 2).sum().backward()
        print(h.grad, x.grad)
    """)
    assert r.diagnostics == []


# ---- runtime errors ------------------------------------------------------------------------------

def test_inplace_on_a_leaf_error_is_explained() -> None:
    r = run("""
        w = torch.ones(3, requires_grad=True)
        w.add_(1)
    """)
    d = r.only("inplace-on-leaf")
    assert (d.severity, d.line, d.step, r.names(d)) == ("error", 2, 0, {"w"})
    assert "`with torch.no_grad(): w.add_(1)`" in d.fix and "`w2 = w.add(1)`" in d.fix


def test_backward_twice_names_the_first_backward() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        loss = (w * 3).exp().sum()
        loss.backward()
        loss.backward()
    """)
    d = r.only("backward-twice")
    assert (d.line, d.lines, r.names(d)) == (4, [3], {"loss"})
    assert "retain_graph=True" in d.fix and "ExpBackward0" in d.message


def test_backward_twice_through_a_carried_hidden_state() -> None:
    r = run("""
        W = torch.randn(3, 3, requires_grad=True)
        h = torch.zeros(3)
        for t in range(3):
            h = torch.tanh(W @ h + 1)
            loss = h.sum()
            loss.backward()
    """)
    d = r.only("backward-twice")
    assert d.line == 6 and "h" in r.names(d) and "`h = h.detach()`" in d.fix
    assert "carried over from an earlier iteration" in d.message


def test_retain_graph_makes_two_passes_fine() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        loss = (w * 3).exp().sum()
        loss.backward(retain_graph=True)
        loss.backward()
    """)
    assert r.result.ok and r.diagnostics == []


def test_backward_without_graph() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            loss = (w * 2).sum()
        loss.backward()
    """)
    d = r.only("backward-without-graph")
    assert d.line == 4 and r.names(d) == {"loss"} and d.lines == [3]
    assert "computed from `w`, which requires grad" in d.message and "`torch.no_grad()`" in d.message
    assert [(p.start, p.end, p.text) for p in d.patch] == [(2, 3, "loss = (w * 2).sum()")]


def test_backward_on_a_vector() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        y = w * 2
        y.backward()
    """)
    d = r.only("backward-non-scalar")
    assert d.line == 3 and "[3]" in d.message and "y.backward(torch.ones_like(y))" in d.fix


# ---- graph-cut-by-detach -------------------------------------------------------------------------

def test_a_detach_hidden_in_a_loss_function_is_named_when_backward_fails() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        def my_loss(pred, target):
            diff = pred.detach() - target
            return (diff ** 2).mean()
        loss = my_loss(w * 2, torch.zeros(3))
        loss.backward()
    """)
    d = r.only("backward-without-graph")
    assert (d.line, d.lines, d.severity) == (6, [3], "error") and "calls `.detach()`" in d.message
    assert [(p.start, p.text) for p in d.patch] == [(3, "    diff = pred - target")]


def test_a_helper_whose_job_is_to_detach_is_fine() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        def snapshot(t):
            return t.detach().clone()
        s = snapshot(w * 2)
    """)
    assert r.diagnostics == []


# ---- unneeded-clone ------------------------------------------------------------------------------

def test_clone_that_is_never_modified() -> None:
    r = run("""
        a = torch.randn(1000)
        b = a.clone()
        print(b.sum() + a.sum())
    """)
    d = r.only("unneeded-clone")
    ns = namespace(r.code)
    assert (d.severity, d.line, r.names(d)) == ("info", 2, {"a", "b"})
    assert d.bytes == ns["b"].untyped_storage().nbytes() == 4000


@pytest.mark.parametrize("code", [
    "a = torch.randn(1000)\nb = a.clone()\nb.add_(1)\n",            # the copy is modified
    "a = torch.randn(1000)\nb = a.clone()\na.mul_(2)\nprint(b)\n",   # the source is: b keeps old values
    "big = torch.randn(1000)\nsmall = big[:10].clone()\n",           # compacts a view
    "a = torch.randn(1000)\na = a.clone()\n",                        # nothing is held twice
    "a = torch.randn(3)\nb = a.clone()\n",                           # 12 bytes: not worth a word
])
def test_clones_that_are_needed_or_free_are_fine(code: str) -> None:
    assert run(code).diagnostics == []


# ---- robustness ----------------------------------------------------------------------------------

@pytest.mark.parametrize("code", ["", "x = (\n", "for i in range(10**6):\n    pass\n", "1/0\n"])
def test_diagnose_handles_odd_runs(code: str) -> None:
    r = run(code)
    assert all(d.rule != "graph-kept-by-container" for d in r.diagnostics)


def test_huge_lines_are_quoted_short() -> None:
    long_name = "x" * 3000
    r = run(f"w = torch.randn(3, requires_grad=True)\nlosses = []\nfor i in range(2):\n"
            f"    {long_name} = (w * i).exp().sum()\n    losses.append({long_name})\n")
    d = r.only("graph-kept-by-container")
    assert len(d.message) < 4096 and "…" in d.message


def test_a_crashing_rule_costs_only_its_own_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.diagnostics import rules

    def broken(context: object) -> list:
        raise ValueError("bug in a rule")

    monkeypatch.setattr(rules, "RULES", {broken: ("broken",), **rules.RULES})
    monkeypatch.setattr("app.diagnostics.RULES", rules.RULES)
    r = run(LOSSES)
    trace = DeltaTrace.model_validate(compress(r.result))
    assert [d.rule for d in diagnose(trace, r.code)] == ["graph-kept-by-container"]
