"""Data pipelines and models as the tutorials build them: text classification with ``EmbeddingBag``
and offsets, ``collate_fn`` padding, samplers, ``Subset``/``ConcatDataset``, attention modules,
encoder layers with their warnings, module containers, a WGAN-GP gradient penalty, a seq2seq step
with attention, optimizer parameter groups, the optimizer-in-backward hook and new-style custom
Functions."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("text-classification-embeddingbag", """\
from torch.utils.data import DataLoader
train_iter = [(1, "the match was a great win"), (2, "stocks fell on the news"),
              (1, "the team won the cup"), (2, "markets rally as stocks rise"),
              (1, "a late goal won the match"), (2, "the bank cut its rates")]
vocab = {}
for _, text in train_iter:
    for token in text.split():
        vocab.setdefault(token, len(vocab))
text_pipeline = lambda x: [vocab[token] for token in x.split()]
label_pipeline = lambda x: int(x) - 1
def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(label_pipeline(_label))
        processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets
class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()
    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()
    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)
model = TextClassificationModel(len(vocab), 8, 2)
dataloader = DataLoader(train_iter, batch_size=3, shuffle=False, collate_fn=collate_batch)
criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=5)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
for epoch in range(1, 4):
    model.train()
    total_acc, total_count = 0, 0
    for idx, (label, text, offsets) in enumerate(dataloader):
        optimizer.zero_grad()
        predicted_label = model(text, offsets)
        loss = criterion(predicted_label, label)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        total_acc += (predicted_label.argmax(1) == label).sum().item()
        total_count += label.size(0)
    scheduler.step()
    lr = scheduler.get_last_lr()[0]
    print(f"| epoch {epoch:3d} | accuracy {total_acc / total_count:8.3f} | lr {lr:.4f}")
print(text.shape, offsets, model.embedding.mode)
bag = nn.EmbeddingBag(10, 3, mode="max")
print(bag(torch.tensor([[1, 2], [3, 4]])).shape, nn.EmbeddingBag(5, 2, mode="sum", padding_idx=0).padding_idx)
""")

snippet("collate-padding", """\
from torch.utils.data import Dataset, DataLoader
from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence, pad_packed_sequence
class Sentences(Dataset):
    def __init__(self):
        self.data = [torch.tensor([1, 2, 3]), torch.tensor([4, 5]), torch.tensor([6]),
                     torch.tensor([7, 8, 9, 10])]
    def __len__(self):
        return len(self.data)
    def __getitem__(self, idx):
        return self.data[idx], len(self.data[idx])
def pad_collate(batch):
    seqs, lens = zip(*batch)
    return pad_sequence(seqs, batch_first=True, padding_value=0), torch.tensor(lens)
loader = DataLoader(Sentences(), batch_size=2, collate_fn=pad_collate)
emb = nn.Embedding(11, 4, padding_idx=0)
rnn = nn.GRU(4, 5, batch_first=True)
for padded, lens in loader:
    print(padded, lens)
    packed = pack_padded_sequence(emb(padded), lens, batch_first=True, enforce_sorted=False)
    out, h = rnn(packed)
    unpacked, out_lens = pad_packed_sequence(out, batch_first=True)
    print(unpacked.shape, out_lens, h.shape, packed.batch_sizes)
print(next(iter(DataLoader(Sentences(), batch_size=1))))
""")

snippet("samplers", """\
from torch.utils.data import (TensorDataset, DataLoader, SequentialSampler, RandomSampler, BatchSampler,
                              SubsetRandomSampler, WeightedRandomSampler, Sampler)
ds = TensorDataset(torch.arange(10).float(), torch.arange(10) % 2)
print(list(SequentialSampler(ds)))
g = torch.Generator().manual_seed(1)
print(list(RandomSampler(ds, generator=g)),
      list(RandomSampler(ds, replacement=True, num_samples=4, generator=g)))
print(list(BatchSampler(SequentialSampler(range(7)), batch_size=3, drop_last=False)))
print(list(BatchSampler(range(7), batch_size=3, drop_last=True)))
print(sorted(SubsetRandomSampler([1, 3, 5], generator=g)))
weights = [0.9 if y == 1 else 0.1 for _, y in ds]
sampler = WeightedRandomSampler(weights, num_samples=20, replacement=True,
                                generator=torch.Generator().manual_seed(0))
labels = torch.stack([ds[i][1] for i in sampler])
print(labels.sum().item() > 10, len(sampler))
class EvenFirst(Sampler):
    def __init__(self, n):
        self.n = n
    def __iter__(self):
        return iter([i for i in range(self.n) if i % 2 == 0] + [i for i in range(self.n) if i % 2])
    def __len__(self):
        return self.n
loader = DataLoader(ds, batch_size=4, sampler=EvenFirst(len(ds)))
print([xb.tolist() for xb, _ in loader])
loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 5, False))
print([yb.tolist() for _, yb in loader], len(loader))
print(len(DataLoader(ds, batch_size=3)), len(DataLoader(ds, batch_size=3, drop_last=True)))
torch.manual_seed(0)
print([xb.tolist() for xb, _ in DataLoader(ds, batch_size=5, shuffle=True)])
""")

snippet("dataset-composition", """\
from torch.utils.data import (TensorDataset, ConcatDataset, Subset, DataLoader, random_split, default_collate,
                              StackDataset)
a = TensorDataset(torch.zeros(3, 2), torch.zeros(3))
b = TensorDataset(torch.ones(4, 2), torch.ones(4))
both = ConcatDataset([a, b])
print(len(both), both[2][1], both[3][1], both.cumulative_sizes)
sub = Subset(both, [0, 6, 3])
print(len(sub), [y.item() for _, y in sub])
train, val = random_split(both, [0.7, 0.3], generator=torch.Generator().manual_seed(42))
print(len(train), len(val), sorted(train.indices), type(train).__name__)
print(default_collate([{"x": torch.ones(2), "y": 1}, {"x": torch.zeros(2), "y": 0}]))
print(default_collate([(1.5, "a"), (2.5, "b")]))
stacked = StackDataset(inputs=torch.arange(3), targets=torch.arange(3) * 10)
print(stacked[1], len(stacked))
for batch in DataLoader(stacked, batch_size=2):
    print(batch)
""")

snippet("multihead-attention", """\
torch.manual_seed(0)
mha = nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True)
x = torch.randn(2, 4, 8)
key_padding_mask = torch.tensor([[False, False, True, True], [False, False, False, False]])
out, weights = mha(x, x, x, key_padding_mask=key_padding_mask)
print(out.shape, weights.shape, weights[0, :, 2:].abs().max().item())
print(weights.sum(-1).round(decimals=4))
_, per_head = mha(x, x, x, need_weights=True, average_attn_weights=False)
print(per_head.shape)
causal = nn.Transformer.generate_square_subsequent_mask(4)
print(causal)
_, w = mha(x, x, x, attn_mask=causal)
print(torch.triu(w[0], diagonal=1).abs().max().item())
out.sum().backward()
print(mha.in_proj_weight.grad.shape, mha.out_proj.weight.grad is not None)
q = torch.randn(2, 2, 4, 4)
sdpa = F.scaled_dot_product_attention(q, q, q, is_causal=True)
scores = (q @ q.transpose(-2, -1) / 2).masked_fill(torch.ones(4, 4).triu(1).bool(), float("-inf"))
manual = scores.softmax(-1) @ q
print(torch.allclose(sdpa, manual, atol=1e-5))
""")

snippet("transformer-encoder-warnings", """\
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True,
                                   norm_first=True)
encoder = nn.TransformerEncoder(layer, num_layers=2)
src = torch.randn(2, 5, 8)
mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
out = encoder(src, src_key_padding_mask=mask)
print(out.shape, out.requires_grad)
encoder.eval()
with torch.no_grad():
    print(encoder(src).shape)
decoder_layer = nn.TransformerDecoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
decoder = nn.TransformerDecoder(decoder_layer, num_layers=1)
print(decoder(torch.randn(3, 2, 8), torch.randn(5, 2, 8)).shape)
print(sum(p.numel() for p in encoder.parameters()), len(encoder.layers))
""")

snippet("module-containers", """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.acts = nn.ModuleDict({"relu": nn.ReLU(), "tanh": nn.Tanh()})
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(4) * i) for i in range(3)])
        self.bias = nn.ParameterDict({"a": nn.Parameter(torch.zeros(4))})
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("tmp", torch.ones(1), persistent=False)
    def forward(self, x, act="relu"):
        for layer, scale in zip(self.layers, self.scales):
            x = self.acts[act](layer(x) * scale)
        self.running.add_(x.detach().mean(0))
        return x + self.bias["a"]
net = Net()
out = net(torch.randn(2, 4), act="tanh")
print(out.shape, len(net.layers), list(net.acts.keys()), len(net.scales))
print([n for n, _ in net.named_parameters()])
print([n for n, _ in net.named_buffers()], list(net.state_dict().keys())[-2:])
print([n for n, _ in net.named_modules()][:4])
net.layers.append(nn.Linear(4, 4))
net.layers.insert(0, nn.Identity())
print(len(net.layers), net.layers[-1].in_features, net.layers[0])
net.apply(lambda m: nn.init.zeros_(m.weight) if isinstance(m, nn.Linear) else None)
print(net.layers[1].weight.abs().sum().item(), net.get_submodule("acts.tanh"),
      net.get_parameter("bias.a").shape)
net.half()
print(net.scales[0].dtype, net.running.dtype)
net.requires_grad_(False)
print(any(p.requires_grad for p in net.parameters()), net.training, net.eval().training)
""")

snippet("wgan-gradient-penalty", """\
torch.manual_seed(0)
critic = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
real, fake = torch.randn(5, 4), torch.randn(5, 4)
def gradient_penalty(critic, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_interpolates = critic(interpolates)
    gradients = torch.autograd.grad(outputs=d_interpolates, inputs=interpolates,
                                    grad_outputs=torch.ones_like(d_interpolates),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()
opt = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
for step in range(3):
    opt.zero_grad()
    gp = gradient_penalty(critic, real, fake)
    loss = critic(fake).mean() - critic(real).mean() + 10 * gp
    loss.backward()
    opt.step()
    print(step, gp.grad_fn.name(), round(gp.item(), 3) >= 0)
print([p.grad.shape for p in critic.parameters()])
""")

snippet("seq2seq-attention-step", """\
torch.manual_seed(0)
class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
    def forward(self, input):
        return self.gru(self.embedding(input))
class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)
    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        return torch.bmm(weights, keys), weights
class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None, max_len=4):
        decoder_input = torch.zeros(encoder_outputs.size(0), 1, dtype=torch.long)
        decoder_hidden = encoder_hidden
        outputs, attentions = [], []
        for i in range(max_len):
            embedded = self.embedding(decoder_input)
            query = decoder_hidden.permute(1, 0, 2)
            context, attn_weights = self.attention(query, encoder_outputs)
            output, decoder_hidden = self.gru(torch.cat((embedded, context), dim=2), decoder_hidden)
            output = self.out(output)
            outputs.append(output)
            attentions.append(attn_weights)
            if target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)
            else:
                _, topi = output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        return F.log_softmax(torch.cat(outputs, dim=1), dim=-1), decoder_hidden, torch.cat(attentions, dim=1)
encoder, decoder = EncoderRNN(10, 6), AttnDecoderRNN(6, 12)
enc_opt = torch.optim.Adam(encoder.parameters(), lr=0.01)
dec_opt = torch.optim.Adam(decoder.parameters(), lr=0.01)
criterion = nn.NLLLoss()
input_tensor = torch.tensor([[1, 4, 2, 9], [3, 3, 7, 0]])
target_tensor = torch.tensor([[5, 6, 1, 11], [2, 8, 8, 1]])
for epoch in range(3):
    enc_opt.zero_grad()
    dec_opt.zero_grad()
    encoder_outputs, encoder_hidden = encoder(input_tensor)
    decoder_outputs, _, attn = decoder(encoder_outputs, encoder_hidden, target_tensor)
    loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
    loss.backward()
    enc_opt.step()
    dec_opt.step()
    print(epoch, f"{loss.item():.3f}", attn.shape)
with torch.no_grad():
    outputs, _, attn = decoder(*encoder(input_tensor))
    print(outputs.argmax(-1).shape, attn.sum(-1).round(decimals=4))
""")

snippet("param-groups-freezing", """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
for p in model[0].parameters():
    p.requires_grad_(False)
optimizer = torch.optim.SGD([
    {"params": model[2].weight},
    {"params": model[2].bias, "lr": 0.5, "momentum": 0.0},
], lr=0.1, momentum=0.9)
print([(g["lr"], g["momentum"], len(g["params"])) for g in optimizer.param_groups])
before = model[0].weight.clone()
loss = model(torch.ones(3, 4)).sum()
loss.backward()
print(model[0].weight.grad, model[2].bias.grad)
optimizer.step()
print(torch.equal(before, model[0].weight), model[2].bias)
optimizer.add_param_group({"params": model[0].parameters(), "lr": 0.01})
print(len(optimizer.param_groups), optimizer.param_groups[2]["momentum"])
model[0].requires_grad_(True)
trainable = [n for n, p in model.named_parameters() if p.requires_grad]
print(trainable)
sd = optimizer.state_dict()
print(sd["param_groups"][0]["params"], sorted(sd["state"]), list(sd["state"][0].keys()))
optimizer.zero_grad(set_to_none=True)
print(model[2].weight.grad)
""")

snippet("optimizer-in-backward", """\
model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
optimizer_dict = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}
def optimizer_hook(parameter) -> None:
    optimizer_dict[parameter].step()
    optimizer_dict[parameter].zero_grad()
handles = [p.register_post_accumulate_grad_hook(optimizer_hook) for p in model.parameters()]
w0 = model[1].weight.clone()
model(torch.ones(2, 3)).sum().backward()
print([p.grad for p in model.parameters()])
print(torch.allclose(model[1].weight, w0 - 0.1 * 2 * model[0](torch.ones(1, 3)).detach(), atol=1e-6))
for h in handles:
    h.remove()
model(torch.ones(2, 3)).sum().backward()
print([p.grad is not None for p in model.parameters()])
""")

snippet("function-setup-context-vmap", """\
from torch.func import vmap, grad
class MySin(torch.autograd.Function):
    generate_vmap_rule = True
    @staticmethod
    def forward(x):
        return torch.sin(x)
    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * torch.cos(x)
x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
y = MySin.apply(x)
y.sum().backward()
print(y.grad_fn.name(), x.grad.round(decimals=4))
print(vmap(MySin.apply)(torch.zeros(2, 3)))
print(grad(lambda t: MySin.apply(t).sum())(torch.zeros(3)))
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.mark_non_differentiable
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * ((x >= ctx.lo) & (x <= ctx.hi)), None, None
z = torch.tensor([-2.0, 0.5, 3.0], requires_grad=True)
Clamp.apply(z, -1, 1).sum().backward()
print(z.grad, torch.autograd.gradcheck(MySin.apply, (torch.randn(3, dtype=torch.double,
                                                                  requires_grad=True),)))
""")

snippet("grad-mode-decorators", """\
@torch.no_grad()
def evaluate(model, x):
    return model(x)
@torch.inference_mode()
def predict(model, x):
    return model(x)
@torch.enable_grad()
def with_grad(x):
    return x * 2
model = nn.Linear(2, 1)
x = torch.ones(1, 2)
e = evaluate(model, x)
p = predict(model, x)
print(e.requires_grad, p.requires_grad, p.is_inference(), torch.is_inference_mode_enabled())
with torch.no_grad():
    y = with_grad(torch.ones(1, requires_grad=True))
print(y.requires_grad, torch.is_grad_enabled())
with torch.set_grad_enabled(False):
    print(model(x).requires_grad)
torch.set_grad_enabled(False)
print(model(x).grad_fn)
torch.set_grad_enabled(True)
try:
    p.add_(1)
except RuntimeError as err:
    print(err)
print((p.clone() + 1).requires_grad)
""")
