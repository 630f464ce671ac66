"""The beanstalkd 1.12 front end: its connections (sessions), replies, tubes and stats."""
