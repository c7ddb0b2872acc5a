"""Errors raised while building or validating a graph or a placement."""
from transport.errors import InvalidArgument


class GraphError(InvalidArgument):
    """An invalid graph: the message names the node, edge or walk at fault."""
