"""CNNs of the zoo, written after torchvision's definitions (torchvision itself is not a dependency).

Random weights only. Architectures follow torchvision so that MAC totals match its published figures.
"""
from __future__ import annotations


def _nn():
    import torch.nn as nn

    return nn


# --- ResNet (He et al. 2016; torchvision.models.resnet) ------------------------------------------------------------
def resnet(depth: int = 18, num_classes: int = 1000):
    import torch
    import torch.nn as nn

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + idt)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # stride on the 3x3 (ResNet v1.5)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + idt)

    cfg = {18: (BasicBlock, [2, 2, 2, 2]), 34: (BasicBlock, [3, 4, 6, 3]), 50: (Bottleneck, [3, 4, 6, 3]),
           101: (Bottleneck, [3, 4, 23, 3])}
    if depth not in cfg:
        raise ValueError(f"resnet depth must be one of {sorted(cfg)}, got {depth}")
    block, layers = cfg[depth]

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make(64, layers[0])
            self.layer2 = self._make(128, layers[1], 2)
            self.layer3 = self._make(256, layers[2], 2)
            self.layer4 = self._make(512, layers[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * block.expansion, num_classes)

        def _make(self, planes, n, stride=1):
            down = None
            if stride != 1 or self.inplanes != planes * block.expansion:
                down = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                     nn.BatchNorm2d(planes * block.expansion))
            mods = [block(self.inplanes, planes, stride, down)]
            self.inplanes = planes * block.expansion
            mods += [block(self.inplanes, planes) for _ in range(1, n)]
            return nn.Sequential(*mods)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = torch.flatten(self.avgpool(x), 1)
            return self.fc(x)

    return ResNet()


# --- MobileNetV2 (Sandler et al. 2018; torchvision.models.mobilenetv2) ---------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def mobilenet_v2(num_classes: int = 1000, width_mult: float = 1.0):
    import torch.nn as nn

    def cbr(cin, cout, k=3, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = int(round(cin * expand))
            self.use_res = stride == 1 and cin == cout
            layers = [cbr(cin, hidden, 1)] if expand != 1 else []
            layers += [cbr(hidden, hidden, 3, stride, groups=hidden),  # depthwise
                       nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
               [6, 320, 1, 1]]

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            cin = _make_divisible(32 * width_mult)
            self.last = _make_divisible(1280 * max(1.0, width_mult))
            feats = [cbr(3, cin, stride=2)]
            for t, c, n, s in setting:
                cout = _make_divisible(c * width_mult)
                for i in range(n):
                    feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            feats.append(cbr(cin, self.last, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last, num_classes))

        def forward(self, x):
            import torch
            import torch.nn.functional as F

            x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


# --- GoogLeNet / Inception v1 (Szegedy et al. 2015; torchvision.models.googlenet, no aux heads at inference) -------
def googlenet(num_classes: int = 1000):
    import torch
    import torch.nn as nn

    class BasicConv2d(nn.Module):
        def __init__(self, cin, cout, **kw):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, bias=False, **kw)
            self.bn = nn.BatchNorm2d(cout, eps=0.001)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    class Inception(nn.Module):
        # torchvision uses a 3x3 (not the paper's 5x5) in branch 3; we keep torchvision's choice, as its figure does
        def __init__(self, cin, ch1, ch3r, ch3, ch5r, ch5, pool_proj):
            super().__init__()
            self.branch1 = BasicConv2d(cin, ch1, kernel_size=1)
            self.branch2 = nn.Sequential(BasicConv2d(cin, ch3r, kernel_size=1),
                                         BasicConv2d(ch3r, ch3, kernel_size=3, padding=1))
            self.branch3 = nn.Sequential(BasicConv2d(cin, ch5r, kernel_size=1),
                                         BasicConv2d(ch5r, ch5, kernel_size=3, padding=1))
            self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True),
                                         BasicConv2d(cin, pool_proj, kernel_size=1))

        def forward(self, x):
            return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)

    class GoogLeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = BasicConv2d(3, 64, kernel_size=7, stride=2, padding=3)
            self.maxpool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv2 = BasicConv2d(64, 64, kernel_size=1)
            self.conv3 = BasicConv2d(64, 192, kernel_size=3, padding=1)
            self.maxpool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
            self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
            self.maxpool3 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
            self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
            self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
            self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
            self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
            self.maxpool4 = nn.MaxPool2d(2, 2, ceil_mode=True)
            self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
            self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.dropout = nn.Dropout(0.2)
            self.fc = nn.Linear(1024, num_classes)

        def forward(self, x):
            x = self.maxpool1(self.conv1(x))
            x = self.maxpool2(self.conv3(self.conv2(x)))
            x = self.maxpool3(self.inception3b(self.inception3a(x)))
            for m in (self.inception4a, self.inception4b, self.inception4c, self.inception4d, self.inception4e):
                x = m(x)
            x = self.inception5b(self.inception5a(self.maxpool4(x)))
            x = torch.flatten(self.avgpool(x), 1)
            return self.fc(self.dropout(x))

    return GoogLeNet()
