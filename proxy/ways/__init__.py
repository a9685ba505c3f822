"""The ways a request goes upstream and its answer comes back, one plug point each: the seam
(`base.Way`), the route's own (`direct`), as it came (`passing`), the bridges to a server of another
API (`ollama`, `gemini`), and the choice between them (`choice`). The pipeline sends and relays over
a way without knowing which it is."""
