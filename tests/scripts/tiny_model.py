"""The small model, optimizer and data loader the test training scripts share."""
import torch


def make(steps):
    """(model, optimizer, loader) for ``steps`` batches of 8, seeded and on one thread."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 16), torch.randn(steps * 8, 1))
    return model, optimizer, torch.utils.data.DataLoader(data, batch_size=8)
