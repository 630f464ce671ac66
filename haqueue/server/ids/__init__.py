"""The id service's front end: its requests (UDP datagrams and GET /id/ on the admin port)."""
