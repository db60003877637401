"""What runs behind the page: each state's answers once, worker processes with deadlines, their tasks, the hosted page's
headers."""
