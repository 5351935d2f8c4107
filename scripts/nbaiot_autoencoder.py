"""A peer for the real-traffic benchmark: N-BaIoT's per-device deep autoencoder
(Meidan et al., "N-BaIoT: Network-based Detection of IoT Botnet Attacks Using Deep
Autoencoders", IEEE Pervasive Computing 2018), written here from the paper. Encoder
layers of 75, 50, 33 and 25 % of the input width and a mirrored decoder, trained on
the device's known-normal records, standardised by their mean and standard deviation;
a record is anomalous when its reconstruction error exceeds the training errors'
mean plus one standard deviation."""

import numpy as np
from sklearn.neural_network import MLPRegressor

SEED = 0


def stream(x, attack, labeled):
    """One device's records in capture order (`attack`: 1 for attack records), trained
    on its first `labeled` benign records, as ours is onboarded. Returns the anomaly
    score per record, the decision per record, and which records were the training
    ones (not counted in the false positive rate)."""
    known = np.zeros(len(attack), dtype=bool)
    known[np.flatnonzero(attack == 0)[:labeled]] = True
    train = x[known]
    mean, std = train.mean(axis=0), train.std(axis=0)
    std[std == 0] = 1.0

    def z(a):
        return (a - mean) / std

    widths = [max(1, round(x.shape[1] * share)) for share in (0.75, 0.5, 0.33, 0.25)]
    model = MLPRegressor(
        hidden_layer_sizes=widths + widths[-2::-1], activation="tanh", max_iter=2000, random_state=SEED
    )
    model.fit(z(train), z(train))

    def error(a):
        return ((model.predict(z(a)) - z(a)) ** 2).mean(axis=1)

    fit = error(train)
    scores = error(x)
    return scores, scores > fit.mean() + fit.std(), known


def outcome(name, attack, decisions, known):
    """The streaming table's counts, as `metapu-lab real-traffic` writes them for ours."""
    benign = (attack == 0) & ~known
    hits = np.flatnonzero(decisions[attack == 1])
    return {
        "device": name,
        "benign": int(benign.sum()),
        "benign_alerts": int((decisions & benign).sum()),
        "attack": int((attack == 1).sum()),
        "attack_alerts": int(len(hits)),
        "first_alert": int(hits[0]) + 1 if len(hits) else None,
    }
