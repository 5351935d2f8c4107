//! Plain feed-forward networks: ReLU between layers, linear output.

use tch::{nn, Tensor};

#[derive(Debug)]
pub struct Mlp {
    layers: Vec<nn::Linear>,
}

impl Mlp {
    /// `dims` = [input, hidden…, output]; `dims.len() - 1` layers named "0", "1", ….
    pub fn new(path: &nn::Path, dims: &[i64]) -> Self {
        let layers = dims
            .windows(2)
            .enumerate()
            .map(|(i, io)| nn::linear(path / i.to_string(), io[0], io[1], Default::default()))
            .collect();
        Self { layers }
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_from(0, x)
    }

    /// The layers from `start` on, applied to `x` (the input of layer `start`).
    pub fn forward_from(&self, start: usize, x: &Tensor) -> Tensor {
        let last = self.layers.len() - 1;
        let mut y = x.shallow_clone();
        for (i, layer) in self.layers.iter().enumerate().skip(start) {
            y = y.apply(layer);
            if i < last {
                // In place: the linear layer's output is a fresh tensor that nothing
                // else holds, and its backward does not need it.
                let _ = y.relu_();
            }
        }
        y
    }

    /// Weight `[out, in]` and bias `[out]` of the first layer.
    pub fn first_layer(&self) -> (&Tensor, Option<&Tensor>) {
        (&self.layers[0].ws, self.layers[0].bs.as_ref())
    }
}
