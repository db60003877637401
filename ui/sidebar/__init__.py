"""The sidebar: its controls, their labels and help texts, and the RL section."""
