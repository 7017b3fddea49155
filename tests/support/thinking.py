"""A reasoning model's chat template and thinking markers, for the synthetic thinking pair
(conftest's ``thinking_pair``)."""

from pathlib import Path

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
R1_DISTILL = (TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text()
THINK_TOKENS = ("<think>", "</think>")
QUESTION = "hello world"
