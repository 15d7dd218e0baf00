"""More model training as learners write it (issue 24), checked as in test_engine_models.py: at
every step (the backward passes' node steps included) against a plain run, at the end, and
incremental = whole. Training organised in classes, functions and closures (labels such as
``trainer.model.0.weight`` and ``steps[0].<closure>.net.weight``, which the oracle now resolves), and
loops beyond the plain supervised one: GANs, VAEs, LBFGS, sparse gradients, SWA, GradScaler, autocast.

Found wrong here, and fixed: after ``w.data = ...`` (``vector_to_parameters``), a graph that saved
``w`` (or ``w.t()``) stayed filed under ``w``'s old memory, so a write to its new memory (an
optimizer step, ``w.add_`` under ``no_grad``) did not read the saving node again: incremental kept
the saved tensor where torch (and the whole snapshot) says "modified by an inplace operation".
"""

from __future__ import annotations

import pytest

from tests.engine.test_engine_models import _check

ORGANISED = {
    "a Trainer class holding model, optimizer and history": """
class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.history = []
    def step(self, x, y):
        self.opt.zero_grad()
        loss = F.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.history.append(loss.detach())
        return loss
trainer = Trainer(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)), 0.1)
x, y = torch.randn(3, 2), torch.randn(3, 1)
for epoch in range(2):
    l = trainer.step(x, y)
""",
    "train and evaluate functions with locals": """
def train_one_epoch(model, opt, batches):
    model.train()
    total = 0.0
    for xb, yb in batches:
        opt.zero_grad()
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        total += loss.item()
    return total / len(batches)
@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    correct = 0
    for xb, yb in batches:
        correct += (model(xb).argmax(1) == yb).sum().item()
    return correct
model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
batches = [(torch.randn(4, 3), torch.randint(0, 2, (4,))) for _ in range(2)]
for epoch in range(2):
    train_loss = train_one_epoch(model, opt, batches)
    acc = evaluate(model, batches)
print(round(train_loss, 4), acc)
""",
    "closure-based training with a dict of models": """
nets = {'a': nn.Linear(2, 1), 'b': nn.Linear(2, 1)}
opts = {k: torch.optim.SGD(v.parameters(), lr=0.1) for k, v in nets.items()}
def make_step(name):
    net, opt = nets[name], opts[name]
    def step(x):
        opt.zero_grad()
        loss = net(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss.item()
    return step
steps = [make_step(k) for k in nets]
x = torch.randn(3, 2)
losses = [s(x) for s in steps]
losses += [s(x) for s in steps]
""",
}

TRAINING_LOOPS = {
    "GAN training, the DCGAN tutorial's steps": """
G = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3), nn.Tanh())
D = nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.2, inplace=True), nn.Linear(4, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optD = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
real = torch.randn(4, 3)
real_label, fake_label = 1., 0.
for i in range(2):
    D.zero_grad()
    label = torch.full((4,), real_label)
    output = D(real).view(-1)
    errD_real = criterion(output, label)
    errD_real.backward()
    noise = torch.randn(4, 2)
    fake = G(noise)
    label.fill_(fake_label)
    output = D(fake.detach()).view(-1)
    errD_fake = criterion(output, label)
    errD_fake.backward()
    errD = errD_real + errD_fake
    optD.step()
    G.zero_grad()
    label.fill_(real_label)
    output = D(fake).view(-1)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optG.step()
""",
    "VAE with the reparameterisation trick": """
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 6)
        self.mu = nn.Linear(6, 2)
        self.logvar = nn.Linear(6, 2)
        self.dec = nn.Linear(2, 4)
    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std
    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = self.reparameterize(mu, logvar)
        return torch.sigmoid(self.dec(z)), mu, logvar
vae = VAE()
opt = torch.optim.Adam(vae.parameters(), lr=1e-3)
x = torch.rand(3, 4)
recon, mu, logvar = vae(x)
bce = F.binary_cross_entropy(recon, x, reduction='sum')
kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
loss = bce + kld
opt.zero_grad()
loss.backward()
opt.step()
""",
    "ModuleDict, ParameterList, buffers written in forward": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict({'a': nn.Linear(2, 2), 'b': nn.Linear(2, 1)})
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(2)) for _ in range(2)])
        self.pd = nn.ParameterDict({'bias': nn.Parameter(torch.zeros(1))})
        self.register_buffer('count', torch.zeros(1))
        self.register_buffer('ema', torch.zeros(2), persistent=False)
    def forward(self, x):
        self.count += 1
        h = self.layers['a'](x) * self.scales[0] * self.scales[1]
        self.ema = 0.9 * self.ema + 0.1 * h.detach().mean(0)
        return self.layers['b'](h) + self.pd['bias']
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for i in range(2):
    out = net(torch.randn(3, 2))
    out.mean().backward()
    opt.step()
    opt.zero_grad()
print(net.count, list(net.state_dict().keys()))
""",
    "residual block with an in-place ReLU and out += identity": """
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out += identity
        out = self.relu(out)
        return out
net = nn.Sequential(nn.Conv2d(1, 2, 1), Block(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.1, weight_decay=5e-4)
x = torch.randn(2, 1, 4, 4)
for i in range(2):
    loss = net(x).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    "pre-norm transformer block by hand, tied head": """
class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
    def forward(self, x):
        T = x.size(1)
        mask = torch.triu(torch.full((T, T), float('-inf')), diagonal=1)
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x
tok = nn.Embedding(7, 4)
pos = nn.Parameter(torch.zeros(1, 3, 4))
block = Block(4, 2)
head = nn.Linear(4, 7, bias=False)
head.weight = tok.weight
idx = torch.randint(0, 7, (2, 3))
x = tok(idx) + pos
logits = head(block(x))
loss = F.cross_entropy(logits.view(-1, 7), idx.view(-1))
loss.backward()
""",
    "nanoGPT-style optimizer groups and sampling": """
model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5))
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
groups = [{'params': decay, 'weight_decay': 0.1}, {'params': nodecay, 'weight_decay': 0.0}]
opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))
idx = torch.zeros((1, 1), dtype=torch.long)
logits = model(idx)
loss = F.cross_entropy(logits.view(-1, 5), torch.tensor([1]))
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
model.eval()
with torch.no_grad():
    for _ in range(3):
        logits = model(idx)[:, -1, :]
        v, _ = torch.topk(logits, 2)
        logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
print(idx)
""",
    "LBFGS with a closure": """
w = nn.Parameter(torch.tensor([1.5, -0.5]))
opt = torch.optim.LBFGS([w], lr=0.5, max_iter=3)
def closure():
    opt.zero_grad()
    loss = ((w - 1) ** 2).sum()
    loss.backward()
    return loss
for i in range(2):
    loss = opt.step(closure)
print(w)
""",
    "sparse embeddings with SparseAdam and SGD": """
emb = nn.Embedding(5, 2, sparse=True)
emb2 = nn.Embedding(5, 2, sparse=True)
o1 = torch.optim.SparseAdam(emb.parameters(), lr=0.1)
o2 = torch.optim.SGD(emb2.parameters(), lr=0.1)
idx = torch.tensor([1, 3, 3])
for i in range(2):
    o1.zero_grad(); o2.zero_grad()
    (emb(idx).sum() + emb2(idx).pow(2).sum()).backward()
    g = emb.weight.grad
    o1.step(); o2.step()
""",
    "weight norm and spectral norm parametrizations": """
from torch.nn.utils import parametrizations
lin = parametrizations.weight_norm(nn.Linear(3, 2))
sn = parametrizations.spectral_norm(nn.Linear(3, 3))
x = torch.randn(2, 3)
y = lin(x) + sn(x)[:, :2]
y.sum().backward()
w = lin.weight
sn.eval()
z = sn(x)
""",
    "SWA: AveragedModel, SWALR, update_bn": """
from torch.optim.swa_utils import AveragedModel, SWALR, update_bn
model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
swa = AveragedModel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = SWALR(opt, swa_lr=0.05, anneal_epochs=1)
data = [(torch.randn(4, 2), torch.randn(4, 1)) for _ in range(2)]
for epoch in range(2):
    for x, y in data:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    swa.update_parameters(model)
    sched.step()
update_bn([x for x, _ in data], swa)
""",
    "GradScaler skipping steps with infinite gradients": """
m = nn.Linear(2, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
scaler = torch.amp.GradScaler('cpu', init_scale=2.**127, growth_interval=1)
x = torch.randn(3, 2) * 1e10
for i in range(3):
    opt.zero_grad()
    loss = m(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(scaler.get_scale())
""",
    "autocast reusing its cached cast of a weight in a loop": """
lin = nn.Linear(3, 3)
x = torch.randn(2, 3)
with torch.autocast('cpu', dtype=torch.bfloat16):
    h = x
    for i in range(3):
        h = torch.tanh(lin(h))
    out = h.float().sum()
out.backward()
""",
}

TWINS = {
    "a frozen GRU's saved weight.t(), then the snippet's own weight.t()": """
emb = nn.Embedding(5, 3, max_norm=1.0)
gru = nn.GRU(3, 3)
idx = torch.tensor([[1], [2], [1]])
h = torch.zeros(1, 1, 3)
kept = []
for p in gru.parameters():
    p.requires_grad_(not p.requires_grad)
o, h = gru(emb(idx), h)
kept.append(gru(emb(idx))[0].sum())
r = gru.weight_hh_l0.t()
""",
}

MOVED_UNDER_A_GRAPH = {
    "vector_to_parameters then an optimizer step under a kept graph": """
model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
opt = torch.optim.RMSprop(model.parameters(), lr=0.01, momentum=0.1)
x = torch.randn(4, 2)
loss = model(x).pow(2).mean()
loss.backward()
out = model(x)
vec = torch.nn.utils.parameters_to_vector(model.parameters())
torch.nn.utils.vector_to_parameters(vec * 0.9, model.parameters())
opt.step()
""",
    "w.data replaced under a graph that saved w, then w written": """
w = torch.randn(3, requires_grad=True)
y = (w * 2).sum() + (w * w).sum()
w.data = torch.ones(3)
with torch.no_grad():
    w.add_(1)
""",
    "a linear's weight moved by .data then stepped by SGD, its .t() saved": """
lin = nn.Linear(2, 2)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
out = lin(torch.ones(1, 2))
lin.weight.data = lin.weight.data.clone()
out.sum().backward(retain_graph=True)
opt.step()
""",
}
SHARED_COUNTER_CHAINS = {
    "a linear's weight moved, its old .t() saved and dropped, the new memory written twice": """
emb = nn.Embedding(5, 3, max_norm=1.0)
lin = nn.Linear(3, 3)
bn = nn.BatchNorm1d(3)
idx = torch.tensor([[1], [2], [1]])
acts = {}
y = bn(lin(emb(idx).squeeze(1)))
w = lin.weight
w.data = w.data * 0.5
acts['w'] = lin.weight.detach()
acts['w'].add_(0.1)
with torch.no_grad():
    lin.weight[0].fill_(0.5)
""",
    "a view made after set_ shares the moved tensor's counter": """
w = torch.randn(4, requires_grad=True)
u = torch.randn(4)
d = w.detach()
d.set_(u)
v = d[1:3]
with torch.no_grad():
    w[0] = 3.0
""",
    "a tensor moved three times, its first memory's view written, under a kept graph": """
w = torch.randn(4, requires_grad=True)
d = w.detach()
v = d[1:3]
kept = [(w * w).sum()]
with torch.no_grad():
    w.set_(torch.ones(4))
with torch.no_grad():
    w[0] = 3.0
kept.append((w.exp() * 2).sum())
w.data = w.data.clone()
w.data = torch.randn(4)
v.add_(1)
""",
    "copy_, then a detached view written, then the tensor moved and written": """
w = torch.randn(4, requires_grad=True)
u = torch.randn(4)
d = w.detach()
v = d[1:3]
kept = [w[1:].sin().sum()]
with torch.no_grad():
    w.copy_(u)
v.add_(1)
w.data = u
d.mul_(2)
u.add_(0.5)
""",
}


@pytest.mark.parametrize("name", ORGANISED)
def test_training_organised_in_classes_functions_and_closures(name: str) -> None:
    _check(ORGANISED[name])


@pytest.mark.parametrize("name", TRAINING_LOOPS)
def test_training_loops(name: str) -> None:
    _check(TRAINING_LOOPS[name])


@pytest.mark.parametrize("name", MOVED_UNDER_A_GRAPH)
def test_a_tensor_moved_to_new_memory_under_a_graph_that_saved_it(name: str) -> None:
    """``w.data = ...`` (``vector_to_parameters`` does it) moves a saved tensor, or the base of a
    saved view, to new memory with its version counter: a write there breaks what the graph saved,
    and the saving node must be read again though the memory it saved from was not written."""
    _check(MOVED_UNDER_A_GRAPH[name])


@pytest.mark.parametrize("name", SHARED_COUNTER_CHAINS)
def test_a_version_counter_followed_through_moves_and_later_views(name: str) -> None:
    """One version counter over several storages: a tensor moved by ``set_`` and ``.data =`` more
    than once, views made after a move, memory it passed through dropped from R; every write moves
    the version of every tensor of the counter, and what saved them says so."""
    _check(SHARED_COUNTER_CHAINS[name])


@pytest.mark.parametrize("name", TWINS)
def test_a_saved_copy_matched_to_the_twin_met_first(name: str) -> None:
    """A saved copy torch hands out afresh is shown as the first live tensor alike met (the whole
    snapshot's walk): a new one met earlier (a name bound now) takes over from the twin it had."""
    _check(TWINS[name])
