"""Money: model prices (prices.py), the cost of a request (cost.py) and USD budgets."""
