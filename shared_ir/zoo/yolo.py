"""A YOLOv5s-like detector (Ultralytics YOLOv5 v6.x/v7.0 ``yolov5s.yaml``: depth 0.33, width 0.50).

CSP backbone (C3 blocks), SPPF, PAN neck, three detect heads (strides 8/16/32, 3 anchors × (80 classes + 5)).
The detect heads return the raw per-anchor predictions reshaped to [B, 3, ny, nx, 85] after a sigmoid; the box
decoding against the anchor grid (a few elementwise ops, no MACs) is left out.
"""
from __future__ import annotations


def yolov5s(num_classes: int = 80, depth_multiple: float = 0.33, width_multiple: float = 0.50):
    import math

    import torch
    import torch.nn as nn

    def ch(c):  # width scaling, rounded up to a multiple of 8 as Ultralytics' make_divisible
        return int(math.ceil(c * width_multiple / 8) * 8)

    def n_(n):
        return max(round(n * depth_multiple), 1) if n > 1 else n

    class Conv(nn.Module):
        """Conv2d (no bias) + BatchNorm + SiLU, 'same' padding k//2."""

        def __init__(self, c1, c2, k=1, s=1, p=None):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, bias=False)
            self.bn = nn.BatchNorm2d(c2, eps=0.001, momentum=0.03)
            self.act = nn.SiLU()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c1, c2, shortcut=True, e=1.0):
            super().__init__()
            c_ = int(c2 * e)
            self.cv1 = Conv(c1, c_, 1)
            self.cv2 = Conv(c_, c2, 3)
            self.add = shortcut and c1 == c2

        def forward(self, x):
            return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))

    class C3(nn.Module):
        def __init__(self, c1, c2, n=1, shortcut=True, e=0.5):
            super().__init__()
            c_ = int(c2 * e)
            self.cv1 = Conv(c1, c_, 1)
            self.cv2 = Conv(c1, c_, 1)
            self.cv3 = Conv(2 * c_, c2, 1)
            self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, 1.0) for _ in range(n)))

        def forward(self, x):
            return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))

    class SPPF(nn.Module):
        def __init__(self, c1, c2, k=5):
            super().__init__()
            c_ = c1 // 2
            self.cv1 = Conv(c1, c_, 1)
            self.cv2 = Conv(c_ * 4, c2, 1)
            self.m = nn.MaxPool2d(k, 1, k // 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    class Detect(nn.Module):
        def __init__(self, nc, chs, na=3):
            super().__init__()
            self.no, self.na = nc + 5, na
            self.m = nn.ModuleList(nn.Conv2d(c, self.no * na, 1) for c in chs)

        def forward(self, xs):
            outs = []
            for i, x in enumerate(xs):
                y = self.m[i](x)
                bs, _, ny, nx = y.shape
                y = y.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
                outs.append(y.sigmoid())
            return outs

    class YOLOv5(nn.Module):
        def __init__(self):
            super().__init__()
            c64, c128, c256, c512, c1024 = ch(64), ch(128), ch(256), ch(512), ch(1024)
            # backbone
            self.b0 = Conv(3, c64, 6, 2, 2)                  # P1/2
            self.b1 = Conv(c64, c128, 3, 2)                  # P2/4
            self.b2 = C3(c128, c128, n_(3))
            self.b3 = Conv(c128, c256, 3, 2)                 # P3/8
            self.b4 = C3(c256, c256, n_(6))
            self.b5 = Conv(c256, c512, 3, 2)                 # P4/16
            self.b6 = C3(c512, c512, n_(9))
            self.b7 = Conv(c512, c1024, 3, 2)                # P5/32
            self.b8 = C3(c1024, c1024, n_(3))
            self.b9 = SPPF(c1024, c1024, 5)
            # PAN neck
            self.h10 = Conv(c1024, c512, 1, 1)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.h13 = C3(c1024, c512, n_(3), False)
            self.h14 = Conv(c512, c256, 1, 1)
            self.h17 = C3(c512, c256, n_(3), False)          # P3 out
            self.h18 = Conv(c256, c256, 3, 2)
            self.h20 = C3(c512, c512, n_(3), False)          # P4 out
            self.h21 = Conv(c512, c512, 3, 2)
            self.h23 = C3(c1024, c1024, n_(3), False)        # P5 out
            self.detect = Detect(num_classes, (c256, c512, c1024))

        def forward(self, x):
            x = self.b2(self.b1(self.b0(x)))
            p3 = self.b4(self.b3(x))
            p4 = self.b6(self.b5(p3))
            x = self.b9(self.b8(self.b7(p4)))
            h10 = self.h10(x)
            x = self.h13(torch.cat((self.up(h10), p4), 1))
            h14 = self.h14(x)
            o3 = self.h17(torch.cat((self.up(h14), p3), 1))
            o4 = self.h20(torch.cat((self.h18(o3), h14), 1))
            o5 = self.h23(torch.cat((self.h21(o4), h10), 1))
            return self.detect([o3, o4, o5])

    return YOLOv5()
