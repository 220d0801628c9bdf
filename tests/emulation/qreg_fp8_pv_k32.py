# CPU emulation (numpy) of the 32x32 tile's fp8-numerics P.V on e4m3 MMAs: ldmatrix.x4.trans of e4m3 rows,
# the byte permutes, and the m16n8k32 A/B fragment layouts, against P @ V. Integers stand in for
# e4m3 values (the layout algebra is what it checks). Run: python3 tests/emulation/qreg_fp8_pv_k32.py
import numpy as np
rng = np.random.default_rng(1)
# e4m3 values stand-in: small integers as "bytes" (exact arithmetic in float64); the algebra is what is tested
V = rng.integers(-7, 8, size=(32, 576)).astype(np.int64)      # KV rows x dims (one byte each)
P = rng.integers(-7, 8, size=(16, 32)).astype(np.int64)       # 16 query rows x 32 KV rows
c = 1                                                          # warp quarter
ref = P @ V                                                    # 16 x 576
def ldm_trans_x4(addr_rows):  # addr_rows[i][r] = (kv_row, byte_offset) of matrix i row r (16 bytes = 8 b16)
    regs = [[None]*4 for _ in range(32)]
    for i in range(4):
        for t in range(32):
            q, n = t % 4, t // 4
            out = []
            for rr in (2*q, 2*q+1):
                kvr, off = addr_rows[i][rr]
                out += [V[kvr, off + 2*n], V[kvr, off + 2*n + 1]]   # b16 element n = bytes 2n, 2n+1
            regs[t][i] = out  # bytes 0..3
    return regs
def perm(x, y, sel):  # __byte_perm
    src = x + y
    return [src[(sel >> (4*k)) & 0xf] for k in range(4)]
O = {}
for jj in range(4):
    regs_kk = []
    for kk in range(2):
        # v8_lane: lane l addresses row ((l>>3)&1)*8 + (l&7) (+16kk), chunk 8c + (l>>4) + 2jj (16 B chunks)
        rows = [[None]*8 for _ in range(4)]
        for l in range(32):
            i = l // 8
            kvr = 16*kk + (((l >> 3) & 1) << 3) + (l & 7)
            chunk = 8*c + (l >> 4) + 2*jj
            rows[i][l & 7] = (kvr, chunk*16)
        regs_kk.append(ldm_trans_x4(rows))
    for half in range(2):
        for odd in range(2):
            sel = 0x7531 if odd else 0x6420
            acc = np.zeros((16, 8), dtype=np.int64)
            for t in range(32):
                g, q = t // 4, t % 4
                b0 = perm(regs_kk[0][t][2*half], regs_kk[0][t][2*half+1], sel)
                b1 = perm(regs_kk[1][t][2*half], regs_kk[1][t][2*half+1], sel)
                # B fragment of lane t: col g, k 4q+b (b0), 16+4q+b (b1)
                Bcol = {4*q+b: b0[b] for b in range(4)}; Bcol.update({16+4*q+b: b1[b] for b in range(4)})
                for k, v in Bcol.items(): acc_B = None
                if t == 0: Bm = np.zeros((32, 8), dtype=np.int64)
                for k, v in Bcol.items(): Bm[k, g] = v
            # A: pe words. f16 A fragments of kk: a0 (row g, k 2q,2q+1), a1 (g+8, ..), a2 (g, 2q+8, 2q+9), a3 (g+8, ..)
            Am = np.zeros((16, 32), dtype=np.int64)
            for t in range(32):
                g, q = t // 4, t % 4
                for kk in range(2):
                    a = [[P[g, 16*kk+2*q], P[g, 16*kk+2*q+1]], [P[g+8, 16*kk+2*q], P[g+8, 16*kk+2*q+1]],
                         [P[g, 16*kk+2*q+8], P[g, 16*kk+2*q+9]], [P[g+8, 16*kk+2*q+8], P[g+8, 16*kk+2*q+9]]]
                    pe_lo_row = a[0] + a[2]   # F16x2PairToE4m3x4(pa[0], pa[2]): bytes lo pair then hi pair
                    pe_hi_row = a[1] + a[3]
                    # pe[2kk] -> a0 (kk=0) / a2 (kk=1): row g, k (16kk) + 4q + b
                    for b in range(4):
                        Am[g, 16*kk + 4*q + b] = pe_lo_row[b]
                        Am[g+8, 16*kk + 4*q + b] = pe_hi_row[b]
            D = Am @ Bm   # 16 x 8: col j -> dim 2j + odd of chunk 8c + 2jj + half
            chunk = 8*c + 2*jj + half
            for j in range(8):
                dim = chunk*16 + 2*j + odd
                assert np.array_equal(D[:, j], ref[:, dim]), (jj, half, odd, j)
print("P.V e4m3 k32 fragment algebra matches P @ V for all 128 columns of quarter", c)
