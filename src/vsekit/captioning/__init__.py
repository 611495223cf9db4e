"""Caption generation: the multimodal RNN (Karpathy & Fei-Fei 2015), the structure-content neural
language model (Kiros et al. 2014), nearest-neighbour caption transfer, and caption metrics."""
