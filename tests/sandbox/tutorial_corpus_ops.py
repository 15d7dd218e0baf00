"""Operations as the docs' examples write them, with the warnings torch raises from its own files
(meshgrid without ``indexing``, ``TypedStorage``, ``pin_memory`` without an accelerator), vision
layers (interpolate, unfold/fold, pixel shuffle, transposed convolutions), losses (CTC, KL, BCE with
logits), a module's own ``extra_repr``, the autograd API's corners and the numeric helpers."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("warnings-inside-torch", """\
x, y = torch.meshgrid(torch.arange(3), torch.arange(2))
print(x.shape, y[0])
gx, gy = torch.meshgrid(torch.arange(2), torch.arange(2), indexing="xy")
print(gx)
t = torch.arange(4.0)
s = t.storage()
print(type(s).__name__, s.size(), s.dtype)
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2, pin_memory=True)
print([b[0].shape for b in loader])
print(torch.tensor([1.0, 2.0]).std(unbiased=False), torch.ones(1).std())
""")

snippet("vision-layers", """\
torch.manual_seed(0)
img = torch.arange(16.0).reshape(1, 1, 4, 4)
print(F.interpolate(img, scale_factor=0.5, mode="nearest"))
print(F.interpolate(img, size=(2, 2), mode="bilinear", align_corners=False))
print(nn.Upsample(scale_factor=2, mode="nearest")(torch.tensor([[[[1.0, 2.0]]]])))
patches = F.unfold(img, kernel_size=2, stride=2)
print(patches.shape, patches[0, :, 0])
print(torch.equal(F.fold(patches, output_size=(4, 4), kernel_size=2, stride=2), img))
ps = nn.PixelShuffle(2)
print(ps(torch.arange(8.0).reshape(1, 4, 1, 2)).shape, nn.PixelUnshuffle(2)(img).shape)
netG = nn.Sequential(nn.ConvTranspose2d(8, 4, 4, 1, 0, bias=False), nn.BatchNorm2d(4), nn.ReLU(True),
                     nn.ConvTranspose2d(4, 1, 4, 2, 1, bias=False), nn.Tanh())
noise = torch.randn(2, 8, 1, 1)
fake = netG(noise)
print(fake.shape, fake.abs().max().item() <= 1)
print(nn.AdaptiveMaxPool2d((1, 2))(img), nn.AvgPool2d(2)(img).flatten())
print(nn.Conv2d(1, 2, 3, padding="same")(img).shape,
      nn.Conv1d(2, 4, 3, dilation=2)(torch.randn(1, 2, 10)).shape)
print(nn.Unflatten(1, (2, 2))(torch.ones(3, 4)).shape, nn.Flatten(0)(torch.ones(2, 3)).shape)
grid = F.affine_grid(torch.eye(2, 3).unsqueeze(0), (1, 1, 4, 4), align_corners=False)
print(torch.allclose(F.grid_sample(img, grid, align_corners=False), img))
""")

snippet("losses-tour", """\
torch.manual_seed(0)
ctc_loss = nn.CTCLoss()
log_probs = torch.randn(6, 2, 5).log_softmax(2).detach().requires_grad_()
targets = torch.tensor([[1, 2, 2], [3, 1, 4]])
loss = ctc_loss(log_probs, targets, torch.tensor([6, 6]), torch.tensor([3, 2]))
loss.backward()
print(loss.grad_fn.name(), log_probs.grad.shape)
kl = nn.KLDivLoss(reduction="batchmean")
p = F.log_softmax(torch.tensor([[1.0, 2.0, 3.0]]), dim=1)
q = F.softmax(torch.tensor([[1.0, 1.0, 1.0]]), dim=1)
print(kl(p, q).round(decimals=4))
print(nn.KLDivLoss()(p, q).round(decimals=4))
bce = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([2.0]))
print(bce(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])).round(decimals=4))
print(F.binary_cross_entropy(torch.tensor([0.5]), torch.tensor([1.0])).round(decimals=4))
print(nn.HuberLoss(delta=0.5)(torch.tensor([0.0, 2.0]), torch.zeros(2)),
      nn.SmoothL1Loss()(torch.tensor([3.0]), torch.zeros(1)))
smoothed = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
print(smoothed(torch.eye(3), torch.tensor([0, 1, -100])).round(decimals=4))
weighted = nn.NLLLoss(weight=torch.tensor([1.0, 2.0]))
print(weighted(torch.log(torch.tensor([[0.5, 0.5]])), torch.tensor([1])).round(decimals=4))
print(nn.CosineEmbeddingLoss()(torch.ones(1, 2), torch.ones(1, 2), torch.tensor([1])),
      nn.MarginRankingLoss()(torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor([1.0])))
print(nn.TripletMarginLoss()(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2)).round(decimals=4))
print(F.cosine_similarity(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]])).round(decimals=4),
      F.normalize(torch.tensor([[3.0, 4.0]])))
print(torch.cdist(torch.zeros(1, 2), torch.tensor([[3.0, 4.0]])),
      F.pairwise_distance(torch.zeros(1, 2), torch.ones(1, 2)).round(decimals=4))
""")

snippet("extra-repr", """\
class Scale(nn.Module):
    def __init__(self, factor, learnable=False):
        super().__init__()
        self.factor = nn.Parameter(torch.tensor(factor)) if learnable else factor
        self.learnable = learnable
    def forward(self, x):
        return x * self.factor
    def extra_repr(self):
        return f"factor={float(self.factor):.2f}, learnable={self.learnable}"
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("scale", Scale(2.0))
        self.register_module("learned", Scale(0.5, learnable=True))
        self.fc = nn.Linear(2, 2)
    def forward(self, x):
        return self.learned(self.scale(self.fc(x)))
b = Block()
print(b)
print(b(torch.ones(1, 2)).shape, [n for n, _ in b.named_parameters()])
print(repr(nn.Linear(3, 4, bias=False)), nn.Dropout(0.1), nn.LeakyReLU(0.2, inplace=True))
print(nn.Conv2d(3, 8, kernel_size=(3, 5), stride=2, padding=1, groups=1, dilation=2, padding_mode="reflect"))
print(nn.LSTM(4, 8, batch_first=True, dropout=0.1, num_layers=2))
""")

snippet("autograd-api-corners", """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x * 2
y.backward(gradient=torch.tensor([0.1, 1.0, 0.0001]))
print(x.grad)
a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(3.0, requires_grad=True)
unused = torch.tensor(1.0, requires_grad=True)
out = a * b
ga, gu = torch.autograd.grad(out, [a, unused], allow_unused=True, retain_graph=True)
print(ga, gu)
print(torch.autograd.grad(out, [a, unused], allow_unused=True, materialize_grads=True))
torch.autograd.backward([a * 2, b * 3], [torch.tensor(1.0), torch.tensor(2.0)])
print(a.grad, b.grad)
z = torch.tensor([1.0, 2.0], requires_grad=True)
(dz,) = torch.autograd.grad((z ** 3).sum(), z, create_graph=True)
(d2z,) = torch.autograd.grad(dz.sum(), z, retain_graph=True)
print(dz, d2z)
v = torch.ones(2)
hvp = torch.autograd.grad(dz, z, grad_outputs=v)[0]
print(hvp)
w = torch.ones(2, requires_grad=True)
q = w.exp()
q.retain_grad()
q.sum().backward(inputs=[q])
print(q.grad, w.grad)
with torch.autograd.graph.save_on_cpu():
    r = (w * w).sin()
r.sum().backward()
print(w.grad.round(decimals=4), r.grad_fn.next_functions[0][0].name())
print(torch.autograd.functional.jacobian(lambda t: t ** 2, torch.tensor([1.0, 2.0])))
print(torch.autograd.functional.hessian(lambda t: (t ** 3).sum(), torch.tensor([1.0, 2.0])))
""")

snippet("numeric-helpers", """\
x = torch.tensor([0.1, 0.5, 0.9, 1.5, 2.5])
print(torch.bucketize(x, torch.tensor([0.0, 1.0, 2.0])), torch.histc(x, bins=3, min=0, max=3))
print(torch.bincount(torch.tensor([0, 1, 1, 3])),
      torch.searchsorted(torch.tensor([1, 3, 5]), torch.tensor([2, 6])))
print(torch.cumprod(torch.tensor([1, 2, 3]), 0), torch.diff(torch.tensor([1, 4, 9])),
      torch.logcumsumexp(torch.zeros(3), 0).round(decimals=4))
print(torch.kron(torch.eye(2), torch.ones(1, 2)), torch.outer(torch.arange(2), torch.arange(3)))
print(torch.cartesian_prod(torch.tensor([1, 2]), torch.tensor([3, 4])), torch.combinations(torch.arange(3)))
print(torch.nan_to_num(torch.tensor([float("nan"), float("inf")]), posinf=9.0),
      torch.isclose(torch.tensor(1.0), torch.tensor(1.0 + 1e-9)))
print(torch.lerp(torch.zeros(2), torch.ones(2), 0.25), torch.hypot(torch.tensor(3.0), torch.tensor(4.0)))
print(torch.block_diag(torch.ones(1, 1), 2 * torch.ones(2, 2)),
      torch.trapezoid(torch.tensor([1.0, 2.0, 3.0])))
print(torch.quantile(torch.arange(5.0), 0.5), torch.median(torch.tensor([3, 1, 2])),
      torch.mode(torch.tensor([1, 2, 2])))
print(torch.count_nonzero(torch.eye(3)), torch.all(torch.ones(2).bool()), torch.any(torch.zeros(2).bool()))
print(torch.rot90(torch.arange(4).reshape(2, 2)), torch.diag_embed(torch.tensor([1, 2])),
      torch.vander(torch.tensor([1, 2, 3]), N=3))
x = torch.arange(6.0).reshape(2, 3)
x.apply_(lambda v: v * 10)
print(x, torch.empty(2, 3).shape, torch.FloatTensor([1, 2]).dtype, torch.LongTensor(2).shape)
""")
