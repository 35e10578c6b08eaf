// SPDX-License-Identifier: MIT
#pragma once
// A byte-level GPT in libtorch (torch::nn): pre-LN transformer blocks with separate q, k, v, o projections
// (no bias), causal softmax attention, a GELU MLP d -> 4d -> d (no bias), token + learned position
// embeddings, a final LayerNorm and an untied head. Init as GPT-2: normal(0, 0.02) for every weight matrix
// and embedding, the two residual projections (o, proj) scaled by 1/sqrt(2 * layers), zero LayerNorm
// shifts and unit gains.
//
// Parameter names (what routing and the per-layer-type diagnostics read): tok_emb.weight, pos_emb.weight,
// blocks.<i>.{ln1,ln2}.{weight,bias}, blocks.<i>.{q,k,v,o,fc,proj}.weight, ln_f.{weight,bias}, head.weight.
#include <cmath>
#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace gpt {

struct GptConfig {
  std::int64_t vocab = 256;
  std::int64_t d_model = 128;
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  std::int64_t context = 64;
};

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& c) : heads(c.heads) {
    const std::int64_t d = c.d_model;
    auto linear = [&](const char* name, std::int64_t in, std::int64_t out) {
      return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
    };
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    q = linear("q", d, d);
    k = linear("k", d, d);
    v = linear("v", d, d);
    o = linear("o", d, d);
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    fc = linear("fc", d, 4 * d);
    proj = linear("proj", 4 * d, d);
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask) {
    const auto B = x.size(0), T = x.size(1), d = x.size(2), hd = d / heads;
    const auto h = ln1->forward(x);
    auto split = [&](const torch::Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };  // B,H,T,hd
    const auto qh = split(q->forward(h)), kh = split(k->forward(h)), vh = split(v->forward(h));
    auto att = torch::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(double(hd));
    att = torch::softmax(att.masked_fill(causal_mask.narrow(0, 0, T).narrow(1, 0, T), -INFINITY), -1);
    const auto y = torch::matmul(att, vh).transpose(1, 2).contiguous().view({B, T, d});
    const auto a = x + o->forward(y);
    return a + proj->forward(torch::gelu(fc->forward(ln2->forward(a))));
  }

  std::int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, fc{nullptr}, proj{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c) : config(c) {
    if (c.d_model % c.heads != 0)
      throw std::invalid_argument("gpt: d_model " + std::to_string(c.d_model) + " is not a multiple of heads " +
                                  std::to_string(c.heads));
    tok_emb = register_module("tok_emb", torch::nn::Embedding(c.vocab, c.d_model));
    pos_emb = register_module("pos_emb", torch::nn::Embedding(c.context, c.d_model));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, c.vocab).bias(false)));
    // true above the diagonal: the positions a token may not attend to (not a buffer: module.to(dtype) must not
    // convert it)
    causal = torch::ones({c.context, c.context}, torch::kBool).triu(1);
    init_weights();
  }

  /// Logits (B, T, vocab) for byte ids (B, T), T <= context.
  torch::Tensor forward(const torch::Tensor& idx) {
    const auto T = idx.size(1);
    auto x = tok_emb->forward(idx) + pos_emb->forward(torch::arange(T, torch::kInt64));
    for (const auto& b : *blocks) x = b->as<Block>()->forward(x, causal);
    return head->forward(ln_f->forward(x));
  }

  /// Mean cross-entropy of predicting y (B, T) from x (B, T).
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& y) {
    const auto logits = forward(x);
    return torch::nn::functional::cross_entropy(logits.view({-1, config.vocab}), y.reshape({-1}));
  }

  void init_weights() {
    torch::NoGradGuard no_grad;
    const double residual = 0.02 / std::sqrt(2.0 * double(config.layers));
    for (auto& item : named_parameters()) {
      const std::string& name = item.key();
      auto& p = item.value();
      if (p.dim() >= 2) {
        const bool is_residual = name.find(".o.weight") != std::string::npos ||
                                 name.find(".proj.weight") != std::string::npos;
        torch::nn::init::normal_(p, 0.0, is_residual ? residual : 0.02);
      } else if (name.find("bias") != std::string::npos) {
        torch::nn::init::zeros_(p);
      } else {
        torch::nn::init::ones_(p);  // LayerNorm gains
      }
    }
  }

  GptConfig config;
  torch::nn::Embedding tok_emb{nullptr}, pos_emb{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor causal;
};
TORCH_MODULE(Gpt);

/// The layer type of a hidden matrix by its name: "q", "k", "v", "o", "fc", "proj", or "" for anything else.
inline std::string layer_type(const std::string& name) {
  for (const std::string t : {"q", "k", "v", "o", "fc", "proj"}) {
    const std::string suffix = "." + t + ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return t;
  }
  return "";
}

/// The block index of a parameter named blocks.<i>...., or -1.
inline int layer_index(const std::string& name) {
  if (name.rfind("blocks.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 7);
}

}  // namespace gpt
