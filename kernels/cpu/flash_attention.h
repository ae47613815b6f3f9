// Causal multi-head self-attention on the CPU in cache-sized tiles (FlashAttention-2's
// algorithm over a register-blocked tile GEMM, tile_gemm.h): the CPU backend's attention.
// It never holds the (T, T) matrix: a query block's scores against one key block at a time
// live in a per-thread tile, the softmax is online (running row max and sum), and the
// backward recomputes each tile's probabilities from the forward's per-row log-sum-exp. The
// materialised kernels in attention.h stay as the reference these are tested against.
//
// Layout as attention.h: qkv: (B, T, 3*C), each row [q | k | v], each of C = NH * HS laid
// out as (NH, HS); C and NH are the LOCAL sizes under tensor parallelism. Scale 1/sqrt(HS);
// position t attends to positions 0..t.
//
// Deterministic: every output element is owned by one task whose arithmetic order is fixed
// (tiles in a fixed order, tile GEMMs of fixed shapes), so the bits do not depend on the
// run or on the thread count; they do depend on the ISA version that runs (isa.h: the row
// sums' lane counts, fused multiply-adds and, at AVX-512, a 16-lane exp), chosen once per
// call. One OpenMP region per call; no BLAS calls inside it.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace strata::kernels::cpu {

// out: (B, T, C) overwritten; lse: (B, NH, T) overwritten with each query row's
// log-sum-exp of its scaled scores (what the backward needs); qkv: (B, T, 3*C).
// Throws KernelError unless NH divides C.
void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH);

// Floats of scratch flash_attention_backward needs: B * NH * T (each row's dout . out).
std::int64_t flash_attention_backward_scratch_floats(int B, int T, int NH);

// dqkv: (B, T, 3*C) += gradient (ACCUMULATES into the q, k and v parts);
// scratch: flash_attention_backward_scratch_floats(B, T, NH) floats, contents ignored;
// dout, out: (B, T, C); qkv: (B, T, 3*C); lse: (B, NH, T) from flash_attention_forward.
void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, int C, int NH);

// Grouped-query attention (Ainslie et al. 2023; Llama 3's 8 KV heads): KVH key/value heads,
// NH % KVH == 0, query head h reads KV head h / (NH / KVH) in place (no copies of K and V).
// qkv and dqkv: (B, T, C + 2 KVC), each row [q (NH, HS) | k (KVH, HS) | v (KVH, HS)],
// KVC = KVH * HS; out, dout: (B, T, C); lse: (B, NH, T); scratch as above. dk and dv of a KV
// head are the sums over its group's query heads, added in head order. KVH == NH is the
// layout and the bits of the overloads above (which call these).
// Throws KernelError unless KVH > 0 divides NH. isa: which compiled version runs (isa.h).
void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH, int KVH, Isa isa = Isa::kBest);
void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, int C, int NH,
                              int KVH, Isa isa = Isa::kBest);

}  // namespace strata::kernels::cpu
