// A fused decoding attention over a KV cache, for benchmarks/bench_decode_attention.py (#34): the scores, softmax and
// weighted values of one query per row and kv head, in one call per layer, against (a) the row's shared prompt, kept
// once per group, and (b) the row's own cache slots, the first s of them filled. Keys and values may be float32 or
// bfloat16; the arithmetic is float32 either way (a bf16 value is a float32 whose low 16 bits are zero: widened by a
// shift, exactly). Keys sit in blocks of 16 slots, each block transposed (D x 16), so the scores of 16 slots are D
// 16-wide multiply-adds over one contiguous block; values stay row-major (slot x D) and their weighted sum builds up
// in registers. The step is bound by reading the cache, so both loops prefetch ahead of the hardware. Rows are split
// across torch's threads (OpenMP: compile with -fopenmp, or at::parallel_for runs on one thread) in order, so the rows
// of one group (adjacent in the batch) find their prompt in cache after the first. AVX-512 (F, BW, VL) when the
// compiler targets it; a scalar loop otherwise.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define DA_AVX512 1
#endif

namespace {

constexpr int64_t kPrefetchBlocks = 4;  // key blocks of 16 slots read ahead
constexpr int64_t kPrefetchSlots = 64;  // value rows read ahead

#ifdef DA_AVX512
inline __mmask16 tail(int64_t left) {  // the first min(left, 16) lanes; none when left <= 0
  return left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
}
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const at::BFloat16* p, __mmask16 m) {
  __m256i raw = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// e^x for 16 floats: 2^n * e^r, r = x - n ln2 in [-ln2/2, ln2/2], e^r by its Taylor series to r^6 (relative error
// ~1e-7); -inf gives exactly 0
inline __m512 exp16(__m512 x) {
  const __mmask16 dead = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.6931471805599453f), x);
  __m512 p = _mm512_set1_ps(1.f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_maskz_mov_ps(~dead, _mm512_scalef_ps(p, n));
}

// score[t] = q . k_t for t < len, keys in blocks of 16 slots, each block transposed: kt[(t / 16) * d * 16 + i * 16 +
// t % 16]; bias (may be null): -inf where not attended
template <typename T>
inline float scores(const float* q, const T* kt, int64_t len, int64_t d, const float* bias, float* score) {
  __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < len; t += 16) {
    const __mmask16 m = tail(len - t);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const T* block = kt + t * d;  // (t / 16) * d * 16
    if (t + kPrefetchBlocks * 16 < len) {  // software prefetch within the filled slots: the hardware's lags behind
      const char* ahead = reinterpret_cast<const char*>(block + kPrefetchBlocks * 16 * d);
      for (int64_t b = 0; b < int64_t(16 * d * sizeof(T)); b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
    }
    int64_t i = 0;
    for (; i + 1 < d; i += 2) {
      acc0 = _mm512_fmadd_ps(_mm512_set1_ps(q[i]), load16(block + i * 16, m), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_set1_ps(q[i + 1]), load16(block + (i + 1) * 16, m), acc1);
    }
    if (i < d) acc0 = _mm512_fmadd_ps(_mm512_set1_ps(q[i]), load16(block + i * 16, m), acc0);
    __m512 acc = _mm512_add_ps(acc0, acc1);
    if (bias) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, bias + t));
    _mm512_mask_storeu_ps(score + t, m, acc);
    top = _mm512_mask_max_ps(top, m, top, acc);
  }
  return _mm512_reduce_max_ps(top);
}

inline float exp_sum(float* score, int64_t len, float top) {
  __m512 total = _mm512_setzero_ps();
  const __m512 shift = _mm512_set1_ps(top);
  for (int64_t t = 0; t < len; t += 16) {
    const __mmask16 m = tail(len - t);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, score + t), shift)));
    _mm512_mask_storeu_ps(score + t, m, e);
    total = _mm512_add_ps(total, e);
  }
  return _mm512_reduce_add_ps(total);
}

// out[0:d] += sum_t w[t] * v_t (values row-major: v[t * d + i]); out in registers, d <= 64 (else in chunks of 64)
template <typename T>
inline void weighted(const float* w, const T* v, int64_t len, int64_t d, float* out) {
  for (int64_t c = 0; c < d; c += 64) {
    const int64_t width = std::min<int64_t>(64, d - c);
    const __mmask16 m0 = tail(width), m1 = tail(width - 16), m2 = tail(width - 32), m3 = tail(width - 48);
    const bool b1 = width > 16, b2 = width > 32, b3 = width > 48;
    __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int64_t t = 0; t < len; ++t) {
      const __m512 a = _mm512_set1_ps(w[t]);
      const T* row = v + t * d + c;
      if (t + kPrefetchSlots < len) {
        const char* ahead = reinterpret_cast<const char*>(row + kPrefetchSlots * d);
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + 64, _MM_HINT_T0);
      }
      o0 = _mm512_fmadd_ps(a, load16(row, m0), o0);
      if (b1) o1 = _mm512_fmadd_ps(a, load16(row + 16, m1), o1);
      if (b2) o2 = _mm512_fmadd_ps(a, load16(row + 32, m2), o2);
      if (b3) o3 = _mm512_fmadd_ps(a, load16(row + 48, m3), o3);
    }
    _mm512_mask_storeu_ps(out + c, m0, _mm512_add_ps(o0, _mm512_maskz_loadu_ps(m0, out + c)));
    if (b1) _mm512_mask_storeu_ps(out + c + 16, m1, _mm512_add_ps(o1, _mm512_maskz_loadu_ps(m1, out + c + 16)));
    if (b2) _mm512_mask_storeu_ps(out + c + 32, m2, _mm512_add_ps(o2, _mm512_maskz_loadu_ps(m2, out + c + 32)));
    if (b3) _mm512_mask_storeu_ps(out + c + 48, m3, _mm512_add_ps(o3, _mm512_maskz_loadu_ps(m3, out + c + 48)));
  }
}
#else
inline float widen(float x) { return x; }
inline float widen(at::BFloat16 x) { return static_cast<float>(x); }

template <typename T>
inline float scores(const float* q, const T* kt, int64_t len, int64_t d, const float* bias, float* score) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < len; ++t) {
    float acc = bias ? bias[t] : 0.f;
    for (int64_t i = 0; i < d; ++i) acc += q[i] * widen(kt[(t / 16) * d * 16 + i * 16 + t % 16]);
    score[t] = acc;
    top = std::max(top, acc);
  }
  return top;
}

inline float exp_sum(float* score, int64_t len, float top) {
  float total = 0.f;
  for (int64_t t = 0; t < len; ++t) total += (score[t] = std::exp(score[t] - top));
  return total;
}

template <typename T>
inline void weighted(const float* w, const T* v, int64_t len, int64_t d, float* out) {
  for (int64_t t = 0; t < len; ++t)
    for (int64_t i = 0; i < d; ++i) out[i] += w[t] * widen(v[t * d + i]);
}
#endif

template <typename T>
void attend_impl(const torch::Tensor& q, const torch::Tensor& pkt, const torch::Tensor& pv,
                 const torch::Tensor& pbias, const torch::Tensor& group, const torch::Tensor& kt,
                 const torch::Tensor& v, int64_t s, const torch::Tensor& kbias, torch::Tensor& out) {
  const int64_t n = q.size(0), kvh = q.size(1), g = q.size(2), d = q.size(3);
  const int64_t p = pv.numel() ? pv.size(2) : 0, cap = v.size(2);
  const int64_t pblocks = p ? pkt.size(2) : 0, blocks = kt.size(2);
  const float* qd = q.data_ptr<float>();
  const T* pkd = p ? pkt.data_ptr<T>() : nullptr;
  const T* pvd = p ? pv.data_ptr<T>() : nullptr;
  const float* pb = p ? pbias.data_ptr<float>() : nullptr;
  const int64_t* gd = group.data_ptr<int64_t>();
  const T* kd = kt.data_ptr<T>();
  const T* vd = v.data_ptr<T>();
  const float* kb = kbias.numel() ? kbias.data_ptr<float>() : nullptr;
  const int64_t kb_stride = kbias.numel() ? kbias.size(1) : 0;
  float* od = out.data_ptr<float>();
  at::parallel_for(0, n * kvh, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> score(p + s + 16);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / kvh, h = task % kvh, u = p ? gd[row] : 0;
      for (int64_t j = 0; j < g; ++j) {
        const float* qj = qd + (task * g + j) * d;
        float* oj = od + (task * g + j) * d;
        float top = -std::numeric_limits<float>::infinity();
        if (p) top = scores(qj, pkd + (u * kvh + h) * pblocks * d * 16, p, d, pb + u * p, score.data());
        top = std::max(top, scores(qj, kd + task * blocks * d * 16, s, d, kb ? kb + row * kb_stride : nullptr,
                                   score.data() + p));
        const float inv = 1.f / exp_sum(score.data(), p + s, top);
        std::memset(oj, 0, d * sizeof(float));
        if (p) weighted(score.data(), pvd + (u * kvh + h) * p * d, p, d, oj);
        weighted(score.data() + p, vd + task * cap * d, s, d, oj);
        for (int64_t i = 0; i < d; ++i) oj[i] *= inv;
      }
    }
  });
}

}  // namespace

// q: (N, kv, G, D) float32; pkt: (U, kv, ceil(P / 16), D, 16) the shared prompts' keys in transposed blocks of 16
// slots, and pv: (U, kv, P, D) their values (both empty when no prompt is shared); pbias: (U, P) float32, 0 where a
// prompt slot is attended, -inf on its padding; group: (N,) int64, each row's prompt; kt: (N, kv, ceil(T / 16), D,
// 16) the rows' own keys, blocked likewise, and v: (N, kv, T, D) their values, the first s slots filled (same dtype
// as pkt); kbias: (N, >= s) float32, 0 on the row's slots it attends to, -inf
// on its prompt's padding (empty: every slot). Returns (N, kv, G, D) float32.
torch::Tensor attend(torch::Tensor q, torch::Tensor pkt, torch::Tensor pv, torch::Tensor pbias, torch::Tensor group,
                     torch::Tensor kt, torch::Tensor v, int64_t s, torch::Tensor kbias) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32 && q.is_contiguous(), "q: contiguous float32");
  TORCH_CHECK(kt.is_contiguous() && v.is_contiguous() && pkt.is_contiguous() && pv.is_contiguous(), "contiguous caches");
  TORCH_CHECK(!kbias.numel() || (kbias.scalar_type() == torch::kFloat32 && kbias.is_contiguous()), "kbias: float32");
  TORCH_CHECK(!pkt.numel() || pkt.scalar_type() == kt.scalar_type(), "prompt and row caches: one dtype");
  auto out = torch::empty_like(q);
  if (kt.scalar_type() == torch::kBFloat16)
    attend_impl<at::BFloat16>(q, pkt, pv, pbias, group, kt, v, s, kbias, out);
  else
    attend_impl<float>(q, pkt, pv, pbias, group, kt, v, s, kbias, out);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("attend", &attend, "fused decoding attention over a KV cache"); }
