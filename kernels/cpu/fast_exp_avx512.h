// fast_expf (fast_exp.h) for 16 floats at once with AVX-512, for the tiled attention's softmax
// rows, where the exp was a sixth of the time at T = 256. The same Cephes reduction and
// polynomial; 2^n is applied by vscalefps, which rounds once and produces denormal, zero and
// infinite results itself, so the clamps and selects that the portable version needs for
// them (a third of its instructions) go away. Callers run it at IsaLevel::kAvx512 only (isa.h).
//
// Accuracy as fast_expf (tests/kernels/fast_exp_avx512_test.cc sweeps the same points): max
// relative error 1.5e-7 tested over the normal-result range; below -104 the result is 0,
// above ln(FLT_MAX) +inf; NaN gives NaN.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define STRATA_HAVE_FAST_EXP_AVX512 1

namespace strata::kernels::cpu {

__attribute__((target("avx512f"))) inline __m512 fast_exp16(__m512 x) {
  // Clamped to [-104, 89] so that n stays small; each clamp returns its second operand when
  // either is NaN (vminps / vmaxps), so a NaN x passes through to a NaN result. e^-104 is
  // below half the least denormal (the result rounds to 0) and e^89 overflows to +inf.
  // (maskz with all lanes throughout: GCC 12 warns of an uninitialized operand in the plain
  // forms.)
  x = _mm512_maskz_min_ps(0xffff, _mm512_set1_ps(89.0f), x);
  x = _mm512_maskz_max_ps(0xffff, _mm512_set1_ps(-104.0f), x);
  const __m512 n =
      _mm512_maskz_roundscale_ps(0xffff, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 in two parts
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 er = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(0xffff, er, n);
}

}  // namespace strata::kernels::cpu

#endif
