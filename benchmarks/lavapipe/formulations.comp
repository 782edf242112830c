#version 450
// One 512^3-class GEMM tile loop, C = A x B, in the formulations compared by formulations.py.
// Each invocation keeps TM rows x TN vec4 columns of C; lanes take neighbouring columns; A's
// reads are the same for every lane. LOAD selects how A and B are read:
//   1 storage buffers          2 storage buffers, B address made lane-uniform (timing only)
//   3 no loads (timing only)   4 uniform texel buffers (texelFetch)   5 storage texel buffers (imageLoad)
layout(local_size_x = LX) in;
#if LOAD == 4
layout(binding = 0) uniform samplerBuffer A4;
layout(binding = 1) uniform samplerBuffer B4;
#define FETCH_A(i) texelFetch(A4, i)
#define FETCH_B(i) texelFetch(B4, i)
#elif LOAD == 5
layout(binding = 0, rgba32f) readonly uniform imageBuffer A4;
layout(binding = 1, rgba32f) readonly uniform imageBuffer B4;
#define FETCH_A(i) imageLoad(A4, i)
#define FETCH_B(i) imageLoad(B4, i)
#else
layout(std430, binding = 0) readonly buffer A_ { vec4 A4[]; };
layout(std430, binding = 1) readonly buffer B_ { vec4 B4[]; };
#define FETCH_A(i) A4[i]
#if LOAD == 2
#define FETCH_B(i) B4[(i) - lane]
#else
#define FETCH_B(i) B4[i]
#endif
#endif
layout(std430, binding = 2) writeonly buffer C_ { float C[]; };

void main() {
    const int lane = int(gl_LocalInvocationID.x);
    const int m0 = int(gl_WorkGroupID.y) * TM;
    const int N4 = N / 4, K4 = K / 4;
    int col[TN];
    for (int j = 0; j < TN; ++j) col[j] = (int(gl_WorkGroupID.x) * TN + j) * LX + lane;
    vec4 acc[TM][TN];
    for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) acc[i][j] = vec4(0.0);
    for (int k4 = 0; k4 < K4; ++k4) {
        vec4 a[TM];
#if LOAD == 3
        for (int i = 0; i < TM; ++i) a[i] = vec4(float(k4 + i) * 1e-3);
#else
        for (int i = 0; i < TM; ++i) a[i] = FETCH_A((m0 + i) * K4 + k4);
#endif
        for (int kk = 0; kk < 4; ++kk) {
            for (int j = 0; j < TN; ++j) {
#if LOAD == 3
                const vec4 b = vec4(float(k4 * 4 + kk) * 2e-3) + vec4(float(lane), 1.0, 2.0, 3.0);
#else
                const vec4 b = FETCH_B((k4 * 4 + kk) * N4 + col[j]);
#endif
                for (int i = 0; i < TM; ++i) acc[i][j] += a[i][kk] * b;
            }
        }
    }
    for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) for (int v = 0; v < 4; ++v)
        C[(m0 + i) * N + col[j] * 4 + v] = acc[i][j][v];
}
