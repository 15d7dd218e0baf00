"""The maths modules as their docs and tutorials use them: ``torch.fft``, ``torch.linalg``, ``einsum``,
complex numbers, ``torch.distributions``, ``torch.special``, sparse tensors, type promotion, and the
tensor-ops tutorial's indexing, gathering and scattering."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("fft-signal", """\
t = torch.arange(16) / 16
signal = torch.sin(2 * math.pi * 3 * t) + 0.5 * torch.sin(2 * math.pi * 5 * t)
spectrum = torch.fft.rfft(signal)
print(spectrum.dtype, spectrum.shape)
print(spectrum.abs().round(decimals=3))
freqs = torch.fft.rfftfreq(16, d=1 / 16)
print(freqs[spectrum.abs() > 1])
back = torch.fft.irfft(spectrum, n=16)
print(torch.allclose(back, signal, atol=1e-6))
full = torch.fft.fft(signal.to(torch.complex64))
print(torch.fft.fftshift(torch.fft.fftfreq(4)), full.real.sum().round(decimals=3))
img = torch.zeros(4, 4)
img[1, 2] = 1
print(torch.fft.fft2(img).abs().sum(), torch.fft.ifft2(torch.fft.fft2(img)).real.round(decimals=4)[1])
x = torch.randn(8, requires_grad=True)
torch.fft.rfft(x).abs().pow(2).sum().backward()
print(x.grad.shape, x.grad.dtype)
""")

snippet("linalg-tour", """\
A = torch.tensor([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]])
b = torch.tensor([1.0, 2.0, 3.0])
x = torch.linalg.solve(A, b)
print(x.round(decimals=4), torch.allclose(A @ x, b))
print(torch.linalg.det(A).round(decimals=3), torch.linalg.inv(A).round(decimals=3))
print(torch.linalg.norm(A).round(decimals=4), torch.linalg.vector_norm(b, ord=1),
      torch.linalg.matrix_norm(A, ord="fro").round(decimals=4))
eigenvalues, eigenvectors = torch.linalg.eigh(A)
print(eigenvalues.round(decimals=4))
print(torch.allclose(eigenvectors @ torch.diag(eigenvalues) @ eigenvectors.T, A, atol=1e-5))
U, S, Vh = torch.linalg.svd(A)
print(S.round(decimals=4), torch.linalg.svdvals(A).round(decimals=4))
Q, R = torch.linalg.qr(A)
print(torch.allclose(Q @ R, A, atol=1e-6), torch.linalg.matrix_rank(A))
L = torch.linalg.cholesky(A)
print(L.round(decimals=4))
sol = torch.linalg.lstsq(torch.tensor([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]),
                         torch.tensor([[1.0], [2.0], [2.0]]))
print(sol.solution.round(decimals=4).flatten())
print(torch.linalg.matrix_power(A, 2)[0], torch.linalg.cross(b, torch.tensor([0.0, 0.0, 1.0])))
try:
    torch.linalg.cholesky(-A)
except torch.linalg.LinAlgError as e:
    print(type(e).__name__, str(e)[:60])
W = torch.randn(3, 3, requires_grad=True)
torch.linalg.det(W @ W.T + torch.eye(3)).backward()
print(W.grad.shape)
""")

snippet("einsum-tour", """\
a = torch.arange(6.0).reshape(2, 3)
b = torch.arange(12.0).reshape(3, 4)
print(torch.einsum("ij,jk->ik", a, b))
print(torch.einsum("ij->ji", a))
print(torch.einsum("ij->", a), torch.einsum("ii->", torch.eye(3) * 2), torch.einsum("ii->i", torch.eye(2)))
print(torch.einsum("i,j->ij", torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0, 5.0])))
batch_a, batch_b = torch.randn(5, 2, 3), torch.randn(5, 3, 4)
print(torch.allclose(torch.einsum("bij,bjk->bik", batch_a, batch_b), torch.bmm(batch_a, batch_b), atol=1e-6))
q = torch.randn(2, 4, 8, requires_grad=True)
k = torch.randn(2, 4, 8)
scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(8)
attn = scores.softmax(dim=-1)
print(attn.shape, attn.sum(-1).round(decimals=4), scores.grad_fn.name())
attn.pow(2).sum().backward()
print(q.grad.shape)
x, W, y = torch.randn(3), torch.randn(2, 3, 4), torch.randn(4)
bilinear = torch.einsum("i,kij,j->k", x, W, y)
print(torch.allclose(bilinear, torch.stack([x @ W[i] @ y for i in range(2)]), atol=1e-5))
print(torch.einsum("...ij,...jk", a.expand(2, 2, 3), b).shape,
      torch.einsum(a, [0, 1], b, [1, 2], [0, 2]).shape)
""")

snippet("complex-numbers", """\
z = torch.tensor([1 + 1j, 2 - 1j, -1j])
print(z, z.dtype, z.real, z.imag)
print(z.abs(), z.angle().round(decimals=4), z.conj(), z.conj().is_conj())
r = torch.view_as_real(z)
print(r, r.shape)
print(torch.view_as_complex(torch.tensor([[3.0, 4.0]])).abs())
p = torch.polar(torch.tensor([2.0]), torch.tensor([math.pi / 2]))
print(p.real.round(decimals=4), p.imag)
c = torch.complex(torch.tensor([1.0, 2.0]), torch.tensor([0.5, -0.5]))
print(c * c, (c @ c.conj()).real, torch.exp(1j * torch.tensor([0.0, math.pi])).real.round(decimals=4))
w = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
loss = (w * w.conj()).real.sum()
loss.backward()
print(w.grad)
print(torch.randn(2, dtype=torch.cfloat).dtype, torch.zeros(1, dtype=torch.complex128))
""")

snippet("distributions-tour", """\
from torch.distributions import Normal, Categorical, Bernoulli, Uniform, MultivariateNormal, kl_divergence
import torch.distributions as dist
normal = Normal(torch.tensor([0.0]), torch.tensor([1.0]))
print(normal)
print(normal.log_prob(torch.tensor([0.0, 1.0])).round(decimals=4), normal.entropy().round(decimals=4))
print(normal.cdf(torch.tensor(0.0)), normal.mean, normal.stddev, normal.batch_shape, normal.event_shape)
torch.manual_seed(0)
samples = normal.sample((4,))
print(samples.shape, samples.requires_grad)
mu = torch.tensor([0.5], requires_grad=True)
sigma = torch.tensor([1.0], requires_grad=True)
z = Normal(mu, sigma).rsample((3,))
z.sum().backward()
print(mu.grad, sigma.grad.shape)
cat = Categorical(logits=torch.tensor([1.0, 2.0, 3.0]))
print(cat.probs.round(decimals=4), cat.entropy().round(decimals=4),
      cat.log_prob(torch.tensor(2)).round(decimals=4))
print(Categorical(probs=torch.tensor([0.25, 0.75])).sample((6,)).shape)
print(Bernoulli(probs=0.3).mean, Uniform(0.0, 2.0).variance.round(decimals=4))
mvn = MultivariateNormal(torch.zeros(2), covariance_matrix=torch.eye(2) * 2)
print(mvn.log_prob(torch.zeros(2)).round(decimals=4), mvn.event_shape)
print(kl_divergence(Normal(0.0, 1.0), Normal(1.0, 2.0)).round(decimals=4))
print(dist.Independent(Normal(torch.zeros(3), torch.ones(3)), 1).event_shape)
try:
    Normal(0.0, -1.0)
except ValueError as e:
    print(str(e).splitlines()[0][:80])
""")

snippet("special-functions", """\
x = torch.tensor([-2.0, 0.0, 0.5, 3.0])
print(torch.special.expit(x).round(decimals=4), torch.special.erf(x).round(decimals=4))
print(torch.special.logit(torch.tensor([0.25, 0.5])).round(decimals=4),
      torch.special.gammaln(torch.tensor([1.0, 5.0])))
print(torch.special.xlogy(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 3.0])).round(decimals=4))
print(torch.special.entr(torch.tensor([0.5, 1.0])).round(decimals=4),
      torch.special.log_softmax(x, dim=0).round(decimals=4))
print(torch.special.i0(torch.tensor([0.0, 1.0])).round(decimals=4),
      torch.special.sinc(torch.tensor([0.0, 0.5])).round(decimals=4))
print(torch.special.logsumexp(x, 0).round(decimals=4), torch.special.round(torch.tensor([1.5, 2.5])))
""")

snippet("sparse-tensors", """\
i = torch.tensor([[0, 1, 1], [2, 0, 2]])
v = torch.tensor([3.0, 4.0, 5.0])
s = torch.sparse_coo_tensor(i, v, (2, 3))
print(s)
print(s.to_dense())
print(s.is_sparse, s._nnz(), s.coalesce().indices())
dense = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
sp = dense.to_sparse()
print(sp.values(), sp.layout)
csr = dense.to_sparse_csr()
print(csr.crow_indices(), csr.col_indices(), csr.values())
w = torch.randn(3, 2, requires_grad=True)
out = torch.sparse.mm(s, w)
out.sum().backward()
print(out.shape, w.grad)
print(torch.sparse.sum(s), (s * 2).to_dense()[1])
""")

snippet("type-promotion", """\
i = torch.tensor([1, 2, 3])
f = torch.tensor([0.5, 1.5, 2.5])
print((i + f).dtype, (i * 2).dtype, (i / 2).dtype, (i // 2).dtype, (i + 2.5).dtype)
print(torch.result_type(i, 1.0), torch.promote_types(torch.int32, torch.float16),
      torch.can_cast(torch.float32, torch.int32))
print(torch.tensor([1, 2], dtype=torch.uint8) + torch.tensor([1], dtype=torch.int8))
print(torch.div(torch.tensor([-7, 7]), 2, rounding_mode="floor"),
      torch.div(torch.tensor([-7, 7]), 2, rounding_mode="trunc"))
print(torch.tensor([True, False]) + 1, torch.tensor([1.0]).double().dtype, torch.tensor(1).half().dtype)
b = torch.zeros(2, dtype=torch.int64)
try:
    b += torch.tensor([0.5, 0.5])
except RuntimeError as e:
    print(e)
print(torch.get_default_dtype(), torch.tensor([1.0]).to(torch.int64), torch.tensor([2.7, -2.7]).long())
print(torch.tensor([300]).to(torch.uint8), torch.tensor([1.0, 2.0], dtype=torch.float64).type(torch.float32))
""")

snippet("tensor-ops-indexing", """\
torch.manual_seed(0)
x = torch.arange(12).reshape(3, 4)
print(x[1], x[:, 1], x[..., -1], x[x > 5], x[[0, 2]], x[[0, 2], [1, 3]])
print(torch.gather(x, 1, torch.tensor([[0], [2], [3]])).flatten())
print(torch.index_select(x, 0, torch.tensor([2, 0])))
print(x.masked_fill(x % 2 == 0, -1))
print(torch.where(x > 6, x, torch.zeros_like(x)))
values, indices = torch.topk(torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0]), 2)
print(values, indices)
print(torch.sort(torch.tensor([3, 1, 2]), descending=True))
print(torch.argmax(x, dim=1), x.max(dim=0).values, x.min(), torch.unique(torch.tensor([3, 1, 3, 2])))
target = torch.zeros(3, 5)
target.scatter_(1, torch.tensor([[1], [3], [0]]), 1.0)
print(target)
print(F.one_hot(torch.tensor([0, 2, 1]), num_classes=3))
print(torch.zeros(5).index_add_(0, torch.tensor([0, 0, 4]), torch.tensor([1.0, 2.0, 3.0])))
print(torch.cat([x, x], dim=0).shape, torch.stack([x, x]).shape, torch.chunk(x, 2, dim=1)[1].shape)
print(x.split([1, 2], dim=0)[1], x.unbind(1)[0], x.flip(0)[0], x.roll(1, 1)[0])
print(torch.tril(torch.ones(3, 3)), torch.triu(torch.ones(3, 3), diagonal=1).sum())
print(x.view(2, 6).stride(), x.t().is_contiguous(), x.unsqueeze(0).shape, x.flatten().shape)
try:
    x.t().view(12)
except RuntimeError as e:
    print(e)
print(torch.clamp(torch.tensor([-2.0, 0.5, 2.0]), min=-1, max=1),
      torch.tensor([[1], [2]]) + torch.tensor([10, 20]))
print(x.sum(dim=(0, 1)), x.float().mean(1), x.prod(), x.cumsum(1)[1], x.float().std().round(decimals=4))
""")

snippet("shape-errors", """\
model = nn.Linear(3, 5)
try:
    model(torch.randn(4, 2))
except RuntimeError as e:
    print(e)
try:
    torch.ones(2, 3) + torch.ones(3, 2)
except RuntimeError as e:
    print(e)
try:
    torch.ones(2, 3) @ torch.ones(2, 3)
except RuntimeError as e:
    print(e)
try:
    F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 2, 3]))
except IndexError as e:
    print(e)
try:
    torch.ones(3).view(2, 2)
except RuntimeError as e:
    print(e)
w = torch.ones(2, requires_grad=True)
try:
    w.add_(1)
except RuntimeError as e:
    print(e)
y = (w * 2).sum()
y.backward()
try:
    y.backward()
except RuntimeError as e:
    print(str(e).split(".")[0])
try:
    torch.ones(2, requires_grad=True).numpy()
except RuntimeError as e:
    print(e)
nn.Conv2d(3, 8, 3)(torch.randn(1, 1, 8, 8))
""")
