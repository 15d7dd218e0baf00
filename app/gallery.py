"""The gallery: every scenario of the clone/detach seed article as a runnable example.

Each example is short (a few steps, well under the step and time limits) and ends in a state worth
looking at. ``diagnostics`` names the diagnostic rules an example is meant to trigger and
``fixed_twin`` the slug of its corrected version; the diagnostics work fills them in.

Titles, summaries and the code's comments are in the catalog (``app.i18n``): ``localized(example)``
is the example in the request's language. Only comments change, so the code runs the same; each
comment is one catalog entry (``app/i18n_extract.py`` finds them for Babel).
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, replace
from functools import cache

from app.i18n import N_, current_locale, gettext


@dataclass(frozen=True)
class Example:
    slug: str
    title: str
    summary: str  # one line: what to look at
    code: str
    diagnostics: tuple[str, ...] = ()
    fixed_twin: str | None = None


def _code(text: str) -> str:
    return text.strip("\n") + "\n"


EXAMPLES: tuple[Example, ...] = (
    Example(
        "clone-vs-detach",
        N_("clone() vs detach()"),
        N_("clone() copies the data into new memory and stays in the graph; detach() shares the memory "
           "and leaves the graph."),
        _code("""
x = torch.tensor([1., 2., 3.], requires_grad=True)
c = x.clone()   # new memory, in the graph
d = x.detach()  # x's memory, out of the graph
print(c.grad_fn, d.grad_fn)
"""),
    ),
    Example(
        "four-combinations",
        N_("The four combinations"),
        N_("clone(), detach(), clone().detach() and detach().clone(): own memory or shared, "
           "in the graph or not."),
        _code("""
x = torch.tensor([1., 2., 3.], requires_grad=True)
a = x.clone()           # own memory, tracked
b = x.detach()          # shared, not tracked
c = x.clone().detach()  # own, not tracked
d = x.detach().clone()  # same as c
"""),
    ),
    Example(
        "losses-keep-graphs",
        N_("A list of losses keeps every graph alive"),
        N_("Appending the loss tensor keeps its whole graph, and the tensors it saved, in memory."),
        _code("""
w = torch.randn(4, requires_grad=True)
losses = []
for i in range(3):
    loss = (w * i).exp().sum()
    losses.append(loss)  # keeps the graph
"""),
        diagnostics=("graph-kept-by-container",),
        fixed_twin="losses-item",
    ),
    Example(
        "losses-item",
        N_("… and .item() lets them go"),
        N_("loss.item() is a Python float: each iteration's graph and saved tensors are freed."),
        _code("""
w = torch.randn(4, requires_grad=True)
losses = []
for i in range(3):
    loss = (w * i).exp().sum()
    losses.append(loss.item())  # a float
"""),
    ),
    Example(
        "inplace-through-detach",
        N_("In-place through a detach() alias"),
        N_("Writing through a detached alias changes the original's memory and bumps its version; "
           "backward then fails."),
        _code("""
x = torch.tensor([1., 2., 3.], requires_grad=True)
y = x.exp()         # ExpBackward0 saves y
alias = y.detach()  # y's memory, no graph
alias.zero_()       # writes y, bumps version
y.sum().backward()  # saved y changed: error
"""),
        diagnostics=("saved-tensor-modified",),
        fixed_twin="inplace-on-a-copy",
    ),
    Example(
        "inplace-on-a-copy",
        N_("… and on a copy, backward works"),
        N_("detach().clone() gives the alias its own memory: zeroing it leaves y, and the graph, intact."),
        _code("""
x = torch.tensor([1., 2., 3.], requires_grad=True)
y = x.exp()                  # ExpBackward0 saves its result: y
copy = y.detach().clone()    # own memory, outside the graph
copy.zero_()                 # y is untouched, its version stays 0
y.sum().backward()
print(x.grad)
"""),
    ),
    Example(
        "inplace-on-leaf",
        N_("In-place on a leaf: the error"),
        N_("A leaf that requires grad cannot be modified in place; autograd refuses."),
        _code("""
w = torch.ones(3, requires_grad=True)
w.add_(1)   # RuntimeError: leaf, in-place
"""),
        diagnostics=("inplace-on-leaf",),
        fixed_twin="clone-then-modify",
    ),
    Example(
        "clone-then-modify",
        N_("Clone, then modify"),
        N_("Modify a clone instead: the copy has its own memory and gradients still reach the leaf."),
        _code("""
w = torch.ones(3, requires_grad=True)
v = w.clone()   # a copy inside the graph
v.add_(1)       # fine: only the copy
v.sum().backward()
print(w.grad)   # flowed back through clone
"""),
    ),
    Example(
        "requires-grad-after-detach",
        N_("requires_grad_() after detach()"),
        N_("A detached tensor that requires grad again is a new leaf: gradients stop there, not at x."),
        _code("""
x = torch.tensor([1., 2.], requires_grad=True)
y = (x * 3).detach()
y.requires_grad_()     # a new leaf
z = (y * y).sum()
z.backward()
print(y.grad, x.grad)  # x.grad is None
"""),
    ),
    Example(
        "freeze-early-layers",
        N_("Freezing early layers"),
        N_("detach() on the early layers' output: only the head gets gradients."),
        _code("""
early = nn.Linear(3, 2)
head = nn.Linear(2, 1)
x = torch.randn(2, 3)
feat = early(x).detach()   # gradients stop here
loss = head(feat).sum()
loss.backward()
print(early.weight.grad)   # None: frozen
print(head.weight.grad)
"""),
    ),
    Example(
        "input-gradient",
        N_("Gradient w.r.t. the input, model frozen"),
        N_("Turn off the parameters' gradients and ask for the input's: only x gets a .grad."),
        _code("""
model = nn.Linear(3, 1)
for p in model.parameters():
    p.requires_grad_(False)   # freeze the model
x = torch.randn(1, 3, requires_grad=True)
score = model(x).sum()
score.backward()
print(x.grad)                 # d score / d x
"""),
    ),
    Example(
        "no-grad-inference",
        N_("Inference under no_grad"),
        N_("Inside torch.no_grad() no graph is built: the output has no grad_fn and saves nothing."),
        _code("""
model = nn.Linear(3, 2)
x = torch.randn(1, 3)
with torch.no_grad():
    y = model(x)       # no graph, nothing saved
print(y.requires_grad, y.grad_fn)
"""),
    ),
    Example(
        "custom-loss-detach",
        N_("A custom loss that accidentally detaches"),
        N_("One detach() inside the loss cuts the graph: the loss has no grad_fn, and backward() has "
           "nothing to go back through."),
        _code("""
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)

def my_loss(pred, target):
    diff = pred.detach() - target  # bug!
    return (diff ** 2).mean()

pred = w * x
loss = my_loss(pred, torch.zeros(3))
loss.backward()  # fails: no graph
"""),
        diagnostics=("backward-without-graph",),
        fixed_twin="custom-loss-fixed",
    ),
    Example(
        "custom-loss-fixed",
        N_("… and without the detach()"),
        N_("The loss stays in the graph: backward() reaches w."),
        _code("""
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)

def my_loss(pred, target):
    diff = pred - target             # no detach(): gradients flow
    return (diff ** 2).mean()

pred = w * x
loss = my_loss(pred, torch.zeros(3))
loss.backward()
print(w.grad)
"""),
    ),
    Example(
        "gradient-penalty",
        N_("torch.autograd.grad for a gradient penalty"),
        N_("autograd.grad with create_graph=True returns a gradient that is itself in a graph."),
        _code("""
w = torch.randn(3, requires_grad=True)
x = torch.randn(3, requires_grad=True)
out = (w * x).sum()
g, = torch.autograd.grad(out, x, create_graph=True)
penalty = (g.norm() - 1) ** 2
penalty.backward()
print(w.grad)
"""),
    ),
    Example(
        "views-share-storage",
        N_("Views share storage"),
        N_("A transpose, a row, a strided column and an expand all read x's cells; one write shows "
           "in all of them."),
        _code("""
x = torch.arange(6.).reshape(2, 3)
t = x.t()            # same cells, new strides
row = x[0]           # the first row
col = x[:, 1]        # every third cell
e = torch.ones(3).expand(2, 3)  # stride 0
row[0] = 100.        # seen by x, t and row
"""),
    ),
    Example(
        "retain-grad",
        N_("retain_grad() on a non-leaf"),
        N_("Non-leaf tensors drop their .grad unless you call retain_grad()."),
        _code("""
x = torch.tensor([1., 2.], requires_grad=True)
h = x * 3
h.retain_grad()      # keep .grad on a non-leaf
y = (h ** 2).sum()
y.backward()
print(h.grad, x.grad)
"""),
    ),

    # Backward, node by node (issue 13): run one, then "Step into" the line that calls backward().
    Example(
        "backward-stopped-by-detach",
        N_("Backward stops at detach()"),
        N_("Step into the backward line: the gradient reaches b, but the branch cut by detach() is "
           "dimmed and w.grad stays None."),
        _code("""
w = torch.tensor([1., 2.], requires_grad=True)
b = torch.tensor([0.5, -0.5], requires_grad=True)
h = (w * 3).detach()   # the gradient stops here
loss = (h * b).sum()
loss.backward()        # step into it: no gradient reaches w
print(b.grad, w.grad)
"""),
    ),
    Example(
        "detach-stops-training",
        N_("A detach() that stops training"),
        N_("The optimizer holds the encoder, but its output is detached on the way to the loss: no "
           "gradient ever reaches the encoder, and it never changes."),
        _code("""
encoder = nn.Linear(4, 8)
decoder = nn.Linear(8, 1)
opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
x = torch.randn(16, 4)
code = encoder(x).detach()   # cuts the encoder off
loss = decoder(code).pow(2).mean()
loss.backward()
opt.step()
print(encoder.weight.grad)   # None: never trained
"""),
        diagnostics=("grad-stays-none",),
        fixed_twin="detach-removed",
    ),
    Example(
        "detach-removed",
        N_("… and without it, both layers train"),
        N_("The gradient flows from the loss through the decoder into the encoder: the optimizer moves "
           "both."),
        _code("""
encoder = nn.Linear(4, 8)
decoder = nn.Linear(8, 1)
opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
x = torch.randn(16, 4)
code = encoder(x)            # stays in the graph
loss = decoder(code).pow(2).mean()
loss.backward()
opt.step()
print(encoder.weight.grad)   # a gradient: trained
"""),
    ),
    Example(
        "two-paths-accumulate",
        N_("Two paths into one leaf"),
        N_("a is used twice: backward sends a gradient down each path and AccumulateGrad adds them "
           "into a.grad."),
        _code("""
a = torch.tensor([1., 2., 3.], requires_grad=True)
b = a * 2        # path 1
c = a.sin()      # path 2
loss = (b + c).sum()
loss.backward()  # step into it: both paths meet at a
print(a.grad)    # equals 2 + cos(a)
"""),
    ),
    Example(
        "backward-twice",
        N_("Backward through the graph a second time"),
        N_("Each node frees its saved tensors as backward passes it: a second backward() over the same "
           "graph fails."),
        _code("""
w = torch.tensor([1., -1., 2.], requires_grad=True)
out = (w.exp() * w).sum()
out.backward()  # step into it: each node frees what it saved
out.backward()  # the saved tensors are gone: error
"""),
        diagnostics=("backward-twice",),
        fixed_twin="retain-graph",
    ),
    Example(
        "retain-graph",
        N_("… and retain_graph=True"),
        N_("retain_graph=True keeps the saved tensors for another pass; the second pass frees them and "
           "the gradients add up in w.grad."),
        _code("""
w = torch.tensor([1., -1., 2.], requires_grad=True)
out = (w.exp() * w).sum()
out.backward(retain_graph=True)  # the saved tensors stay
out.backward()                   # a second pass: they are freed now
print(w.grad)                    # twice the gradient of one pass
"""),
    ),
    Example(
        "backward-hook-prints",
        N_("A hook that prints"),
        N_("register_hook runs while backward passes the tensor: step into the backward line to see "
           "each hook print as its node runs."),
        _code("""
x = torch.tensor([1., 2.], requires_grad=True)
y = x * x
y.register_hook(lambda g: print("grad of y:", g))
x.register_hook(lambda g: print("grad of x:", g))
y.sum().backward()  # step into it: the hooks print in turn
"""),
    ),
    Example(
        "numpy-shares-or-copies",
        N_(".numpy() shares memory, np.array(t) copies"),
        N_("t.numpy() and np.asarray(t) are views of t's storage, np.array(t) a buffer of its own: "
           "a write through a shows in t, one through c does not."),
        _code("""
import numpy as np
t = torch.zeros(3)
a = t.numpy()        # t's memory, seen by numpy
s = np.asarray(t)    # shares it too
c = np.array(t)      # a copy: numpy's own buffer
a[0] = 5.            # t changes; its version does not
c[1] = 7.            # only the copy changes
"""),
    ),
)

_BY_SLUG = {example.slug: example for example in EXAMPLES}


def get_example(slug: str) -> Example | None:
    return _BY_SLUG.get(slug)


def code_comments(code: str) -> list[tuple[int, int, str]]:
    """(line, column, text) of every ``# comment`` in ``code``: the text after ``# ``."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.start[1], token.string[1:].strip()))
    return found


def translate_comments(code: str) -> str:
    """``code`` with every comment in the current language; the code itself unchanged."""
    lines = code.split("\n")
    for line, column, text in reversed(code_comments(code)):
        translated = gettext(text)
        if translated != text:
            row = lines[line - 1]
            lines[line - 1] = row[:column] + "# " + translated  # a comment runs to the end of its line
    return "\n".join(lines)


def localized(example: Example) -> Example:
    """The example in the request's language: title, summary and comments translated."""
    return _localized(example, current_locale())


@cache
def _localized(example: Example, locale: str) -> Example:
    # the locale is the cache's key; gettext reads the same locale from the request's context
    del locale
    return replace(example, title=gettext(example.title), summary=gettext(example.summary),
                   code=translate_comments(example.code))
