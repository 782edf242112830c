#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
// C = A x B, float16 (row-major, M x K and K x N), float32 accumulation: one BM x BN tile of C a
// workgroup, as one workgroup-scope cooperative matrix; the driver stages A and B's BK-deep slices
// (GL_NV_cooperative_matrix2 tensor layouts). Built with -DUNROLL=n (K steps per loop iteration,
// so that the driver can overlap their loads) and -DCLAMP=0, 1 or 2: loads through clamped
// layouts read 0 past the edges; 1 clamps every tile, 2 only the tiles that cross an edge, 0 none
// (every tile must be whole). The store is always clamped: it drops what lies past the edges.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint M = 8192;
layout(constant_id = 5) const uint N = 8192;
layout(constant_id = 6) const uint K = 8192;
layout(std430, binding = 0) readonly buffer A_buf { float16_t A[]; };
layout(std430, binding = 1) readonly buffer B_buf { float16_t B[]; };
layout(std430, binding = 2) writeonly buffer C_buf { float16_t C[]; };
#define CLAMPED tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>
#define NEW_CLAMPED createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV)
#define ROW_MAJOR(t, rows, cols) setTensorLayoutStrideNV(setTensorLayoutDimensionNV(t, rows, cols), cols, 1)
// acc += the A and B slices of one K step, through layouts ta and tb.
#define STEP(ta, tb, k) { \
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a; \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b; \
        coopMatLoadTensorNV(a, A, 0, sliceTensorLayoutNV(ta, m0, BM, k, BK)); \
        coopMatLoadTensorNV(b, B, 0, sliceTensorLayoutNV(tb, k, BK, n0, BN)); \
        acc = coopMatMulAdd(a, b, acc); }
// K in groups of UNROLL steps, then single steps.
#define MULTIPLY(ta, tb) { \
        uint k = 0; \
        for (; k + UNROLL * BK <= K; k += UNROLL * BK) \
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) STEP(ta, tb, k + u * BK) \
        for (; k < K; k += BK) STEP(ta, tb, k) }

void main() {
    const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc = coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    CLAMPED ca = NEW_CLAMPED, cb = NEW_CLAMPED, cc = NEW_CLAMPED;
    ca = ROW_MAJOR(ca, M, K);
    cb = ROW_MAJOR(cb, K, N);
    cc = ROW_MAJOR(cc, M, N);
#if CLAMP != 1
    tensorLayoutNV<2> ua = createTensorLayoutNV(2), ub = createTensorLayoutNV(2);
    ua = ROW_MAJOR(ua, M, K);
    ub = ROW_MAJOR(ub, K, N);
    if (CLAMP == 0 || (m0 + BM <= M && n0 + BN <= N && K % BK == 0))
        MULTIPLY(ua, ub)
    else
#endif
        MULTIPLY(ca, cb)
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> c = coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    coopMatStoreTensorNV(c, C, 0, sliceTensorLayoutNV(cc, m0, BM, n0, BN));
}
