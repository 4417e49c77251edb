"""VRAM requests: the webhook's decision (decide, offers, choice, rewrite) and the fallback's fit (fit, board)."""
