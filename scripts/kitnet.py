"""A peer for the real-traffic benchmark: KitNET, the anomaly detector of Kitsune
(Mirsky et al., "Kitsune: An Ensemble of Autoencoders for Online Network Intrusion
Detection", NDSS 2018), written here from the paper.

- Feature mapper: during the first grace period, the features' correlation distances
  (1 − Pearson correlation) are accumulated; hierarchical clustering of them, cut so
  that no cluster holds more than `max_cluster` features, gives one small group per
  autoencoder.
- Ensemble layer: per group, an autoencoder with tied weights, one hidden layer of
  75 % of its inputs, sigmoid units, inputs scaled to 0–1 by the minimum and maximum
  seen in training, trained online by gradient descent (one step per record); its
  output is the reconstruction RMSE.
- Output layer: the same kind of autoencoder over the ensemble's RMSEs; its RMSE is
  the record's anomaly score.
- Execution: after the second grace period the network only scores. A record is
  anomalous when its score exceeds the highest score seen in training."""

import numpy as np
from scipy.cluster.hierarchy import linkage, to_tree

SEED = 0


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Autoencoder:
    def __init__(self, n, rng, rate=0.1, hidden_share=0.75):
        hidden = max(1, int(np.ceil(n * hidden_share)))
        bound = 1.0 / n
        self.w = rng.uniform(-bound, bound, size=(n, hidden))
        self.b_hidden = np.zeros(hidden)
        self.b_visible = np.zeros(n)
        self.rate = rate
        self.low = np.full(n, np.inf)
        self.high = np.full(n, -np.inf)

    def scale(self, x):
        return (x - self.low) / (self.high - self.low + 1e-16)

    def train(self, x):
        self.low, self.high = np.minimum(self.low, x), np.maximum(self.high, x)
        v = self.scale(x)
        h = sigmoid(v @ self.w + self.b_hidden)
        r = sigmoid(h @ self.w.T + self.b_visible)
        # Squared-error gradient through both sigmoids, tied weights.
        d_visible = (r - v) * r * (1 - r)
        d_hidden = (d_visible @ self.w) * h * (1 - h)
        self.w -= self.rate * (np.outer(v, d_hidden) + np.outer(d_visible, h))
        self.b_hidden -= self.rate * d_hidden
        self.b_visible -= self.rate * d_visible
        return float(np.sqrt(((r - v) ** 2).mean()))

    def score(self, x):
        v = self.scale(x)
        r = sigmoid(sigmoid(v @ self.w + self.b_hidden) @ self.w.T + self.b_visible)
        return float(np.sqrt(((r - v) ** 2).mean()))


def feature_groups(x, max_cluster):
    """Correlation-distance clustering cut into groups of at most `max_cluster`."""
    corr = np.nan_to_num(np.corrcoef(x, rowvar=False), nan=0.0)
    distance = np.clip(1.0 - corr, 0.0, 2.0)
    n = x.shape[1]
    condensed = distance[np.triu_indices(n, k=1)]
    groups, todo = [], [to_tree(linkage(condensed))]
    while todo:
        node = todo.pop()
        if node.get_count() <= max_cluster:
            groups.append(node.pre_order())
        else:
            todo += [node.get_left(), node.get_right()]
    return [sorted(g) for g in groups]


def stream(x, map_grace, train_grace, max_cluster=10):
    """One device's records in order: the first `map_grace` records build the feature
    map, the next `train_grace` train the network, the rest are only scored. Returns
    the anomaly score per record (0 during the feature mapping), the decision per
    record, and which records were training ones."""
    rng = np.random.default_rng(SEED)
    x = np.sign(x) * np.log1p(np.abs(x))  # raw values reach 1e17 (epoch timestamps)
    groups = feature_groups(x[:map_grace], max_cluster)
    ensemble = [Autoencoder(len(g), rng) for g in groups]
    output = Autoencoder(len(groups), rng)
    scores = np.zeros(len(x))
    trained = np.zeros(len(x), dtype=bool)
    trained[: map_grace + train_grace] = True
    for i in range(map_grace, len(x)):
        if i < map_grace + train_grace:
            rmse = np.array([ae.train(x[i, g]) for ae, g in zip(ensemble, groups)])
            scores[i] = output.train(rmse)
        else:
            rmse = np.array([ae.score(x[i, g]) for ae, g in zip(ensemble, groups)])
            scores[i] = output.score(rmse)
    threshold = scores[map_grace : map_grace + train_grace].max(initial=0.0)
    return scores, scores > threshold, trained
