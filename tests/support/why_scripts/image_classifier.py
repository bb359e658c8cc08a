"""Train a small CNN on synthetic photos with the usual torchvision augmentation pipeline.

Written the way the ImageNet and CIFAR tutorials write it: a Dataset that opens a PIL image and
runs RandomResizedCrop, ColorJitter, GaussianBlur and friends on it, a DataLoader with worker
processes, and a plain loop. The designed bottleneck is the input pipeline: each 256x256 sample
goes through a heavy PIL augmentation chain in the workers, while the model is tiny, so the main
process waits for batches (input-bound) and the time is in the transform line of ``__getitem__``.

    python image_classifier.py [--seconds 0] [--steps 0] [--workers 2] [--progress]

``--seconds``/``--steps``: stop after that long or that many steps (0: run until killed).
Prints ``ready`` once the loop runs; with ``--progress`` one ``progress T STEP CPU`` line per
step (monotonic time, steps done, the process's CPU seconds) for benchmarks/why_overhead.py.
"""


import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from _harness import StepClock, parser as harness_parser


class SyntheticPhotos(Dataset):
    """Stands in for an ImageFolder whose files are already decoded: a few RGB images kept in
    memory, each item a copy of one of them (so the augmentation, not the decode, is the work)."""

    def __init__(self, size=10_000, resolution=256, num_classes=10):
        self.size = size
        self.images = [Image.effect_noise((resolution, resolution), 40 + i).convert("RGB") for i in range(16)]
        self.labels = torch.randint(0, num_classes, (size,), generator=torch.Generator().manual_seed(0))
        self.transform = transforms.Compose([
            transforms.RandomResizedCrop(128, scale=(0.5, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
            transforms.GaussianBlur(kernel_size=9, sigma=(0.5, 2.0)),
            transforms.RandomGrayscale(p=0.2),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        image = self.images[index % len(self.images)].copy()
        image = self.transform(image)  # AUGMENT LINE: the heavy part of every sample
        return image, self.labels[index]


class SmallNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def main():
    parser = harness_parser(__doc__, batch_size=16, workers=2)
    args = parser.parse_args()

    torch.set_num_threads(1)
    loader = DataLoader(SyntheticPhotos(), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    model = SmallNet()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    model.train()
    clock = StepClock(args)
    while True:
        for images, labels in loader:
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            if clock.tick():
                return


if __name__ == "__main__":
    main()
