"""Plain ``nn.Module`` models; no distributed imports (they are wrapped from outside)."""
