/* Attention of one new position (a decode step) over each row's cached keys and values, GQA,
   float32 (models/attend_one.py: its caller). AVX-512 (F + DQ).

   Every (row, kv head) is computed whole by one thread in one fixed order, so a row's output
   does not depend on the batch it is in or on the thread count. For query head h (kv head
   h / group) of row r, over that row's n keys j, with 16 lanes l:
     s_j = tree(lanes l: sum over c of q[16c + l] k_j[16c + l], c in order) * scale
           tree: lanes l and l + 8 added, then l and l + 4, l + 2, l + 1
     p_j = exp(s_j - max_j s_j)           exp_nonpositive() below
     out = (sum_j p_j v_j) / sum_j p_j    both sums over j in key order, p_j v_j per element
   Multiplies and adds round separately (no fused multiply-add; -ffp-contract=off).

   q: (rows, kv_heads * group, dim) contiguous, dim a multiple of 16 up to 256; out: the same
   shape; table: the addresses of row r's keys and values at 2r and 2r + 1 (its kv head 0,
   position 0; kv head i at + i * k_head, position j at + j * k_pos elements; the values
   likewise), then the rows' key counts. */

#include "attend_one.h"

int attend_one_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}

AVX512 int attend_one(const float *q, int64_t rows, int64_t kv_heads, int64_t group,
                      int64_t dim, const int64_t *table, int64_t k_head, int64_t k_pos,
                      int64_t v_head, int64_t v_pos, float scale, float *out, int threads) {
    const int64_t items = rows * kv_heads;
    if (dim % LANES || dim / LANES > MAX_CHUNKS) return 2;
    int failed = 0;
    if (threads <= 1) { /* no parallel region to open: small calls (the code predictor's) */
        for (int64_t item = 0; item < items; ++item)
            failed |= attend_item(q, item, rows, kv_heads, group, dim, table, k_head, k_pos,
                                  v_head, v_pos, scale, out);
        return failed;
    }
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : failed)
    for (int64_t item = 0; item < items; ++item)
        failed |= attend_item(q, item, rows, kv_heads, group, dim, table, k_head, k_pos, v_head,
                              v_pos, scale, out);
    return failed; /* 1: no memory for a row's scores (MemoryError in attend_one.py) */
}
