// tcp_store_session.cpp: Session, one connection of TcpStoreServer, on the io thread.
// Bytes become requests (parse_request), requests replies (handle_request); what a
// request released in other connections is delivered through ServerState. Idle
// connections own no buffer: reads land in the server's shared chunk and only an
// incomplete request is copied aside. Sessions never time out: c10d clients keep idle
// connections for hours, and a 1.13 client's callback connection never sends a byte.
#include "store/tcp_store_session.h"

#include "store/core/handler.h"

namespace ddprun::store::server_detail {

Session::~Session() {
  if (!closed_) server_.session_closed(id_);
  account(0);
}

// A WAIT or BARRIER of this client completed: one byte per registration, so bounded.
void Session::push_release() {
  encode_release(out_);
  do_write();
  account(unsent());
}

// A key this (legacy) client watches changed. A watcher that lets these pile up
// unread is closed rather than buffered without limit.
void Session::push_notification(const KvState::Notification& n) {
  encode_notification(n, out_);
  do_write();
  account(unsent());
  if (out_.size() > kMaxPushBacklogBytes ||
      (!out_.empty() && server_.output_bytes > server_.options.max_output_bytes)) {
    close("it does not read its WATCH_KEY notifications (" + std::to_string(unsent()) +
          " bytes unsent)");
  }
}

// Deferred for output budget (ServerState::defer_output), now let go: try again.
void Session::resume_output() {
  if (closed_ || !deferred_) return;
  deferred_ = false;
  resume();
}

// Closes the connection (idempotent). A non-empty `reason` is logged as a warning.
void Session::close(std::string_view reason) {
  if (closed_) return;
  closed_ = true;
  if (!reason.empty()) server_.log_rejected(peer_, reason);
  error_code ignored;
  socket_.close(ignored);  // pending operations complete with operation_aborted
  server_.session_closed(id_);
  stream_.reset();  // lets go of the values it still held
  out_.clear();
  out_.shrink_to_fit();
  account(0);  // pending_ is the write's until it completes, but is no longer counted
}

void Session::do_read() {
  if (reading_ || closed_ || paused_) return;
  reading_ = true;
  // Waiting for readability instead of reading into a per-session buffer keeps idle
  // connections free of any buffer. Its cost: Boost 1.74's epoll reactor re-arms every
  // wait with EPOLL_CTL_MOD (one syscall per request). async_read_some would avoid the
  // MOD but always tries a recv first (1.74 clears that only at EOF): re-armed before
  // the reply it is an EAGAIN recv instead of the MOD; re-armed after, it can take a
  // client's next request ahead of requests that reached other connections earlier
  // (tests rely on arrival order across connections).
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](const error_code& ec) { self->on_readable(ec); });
}

void Session::on_readable(const error_code& ec) {
  reading_ = false;
  if (closed_) return;
  if (ec) return close(ec == asio::error::operation_aborted ? "" : ec.message());
  std::string& chunk = server_.read_buf;
  error_code rec;
  std::size_t n = socket_.read_some(asio::buffer(chunk.data(), chunk.size()), rec);
  if (rec == asio::error::would_block || rec == asio::error::try_again) return do_read();
  if (rec == asio::error::eof || rec == asio::error::connection_reset) return close("");
  if (rec) return close(rec.message());
  if (in_.empty()) {
    std::string_view data(chunk.data(), n);
    std::size_t used = consume(data);
    if (closed_) return;
    in_.assign(data.substr(used));
  } else {
    in_.append(chunk.data(), n);
    std::size_t used = consume(in_);
    if (closed_) return;
    in_.erase(0, used);
  }
  after_consume();
}

void Session::after_consume() {
  if (!paused_ && in_.size() > server_.options.limits.max_request_bytes) {
    return close("request larger than " + std::to_string(server_.options.limits.max_request_bytes) +
                 " bytes");
  }
  do_read();
}

// Handles every complete request at the front of `data`, in order, until this
// connection's or the server's output budget is used up. Returns the bytes used.
std::size_t Session::consume(std::string_view data) {
  std::size_t pos = 0;
  const ServerOptions& opts = server_.options;
  while (!closed_) {
    if (unsent() >= opts.max_connection_output_bytes) {
      do_write();
      account(unsent());
      // Still over only while a write is in flight: its completion resumes reading.
      if (unsent() >= opts.max_connection_output_bytes) {
        paused_ = true;
        break;
      }
    }
    std::string_view rest = data.substr(pos);
    if (!dialect_) {
      std::string error;
      DetectResult d = detect_dialect(rest, opts.limits, error);
      if (d == DetectResult::kNeedMore) break;
      if (d == DetectResult::kBad) {
        close(error);
        break;
      }
      dialect_ = d == DetectResult::kModern ? Dialect::kModern : Dialect::kLegacy;
    }
    ParseResult parsed = parse_request(rest, *dialect_, opts.limits, req_);
    if (parsed.status == ParseStatus::kNeedMore) break;
    if (parsed.status == ParseStatus::kBad) {
      close(parsed.error);
      break;
    }
    const std::size_t need = reply_size(server_.kv, req_);
    if (need > opts.max_reply_bytes) {
      close(std::string(op_name(req_.op)) + ": reply of " + std::to_string(need) +
            " bytes exceeds the limit of " + std::to_string(opts.max_reply_bytes) +
            " bytes (--max-reply-bytes)");
      break;
    }
    // A large GET or MULTI_GET is sent in pieces, one built each time the socket has
    // taken the last: only a piece counts against the budget.
    const bool stream =
        need > kStreamPieceBytes && (req_.op == Op::kGet || req_.op == Op::kMultiGet);
    if (!server_.output_admits(unsent(), stream ? kStreamPieceBytes : need)) {
      // Not consumed: parsed again when the budget lets this session go on.
      paused_ = deferred_ = true;
      server_.defer_output(shared_from_this(), stream ? kStreamPieceBytes : need);
      break;
    }
    pos += parsed.consumed;
    if (stream) {
      // Requests behind it wait until it is all out (paused_, resumed by on_write).
      stream_.emplace(server_.kv, req_);
      paused_ = true;
      break;
    }
    KvState::Effects& fx = server_.fx;
    fx.clear();
    HandleResult result = handle_request(server_.kv, id_, req_, out_, fx);
    account(unsent());
    server_.deliver(fx);
    server_.note_freed();
    if (result.kind == HandleResult::Kind::kClose) {
      close(result.error);
      break;
    }
  }
  if (stream_) {
    fill_from_stream();
  } else {
    do_write();
  }
  account(unsent());
  return pos;
}

// Tops the output up with the next piece of the reply being streamed and writes it.
// When the socket takes it all at once, the next piece comes in a later turn of the
// event loop (posted), so that one fast reader cannot hold the loop.
void Session::fill_from_stream() {
  if (closed_ || !stream_) return;
  if (out_.size() < kStreamPieceBytes) stream_->next(out_, kStreamPieceBytes - out_.size());
  if (stream_->done()) stream_.reset();
  do_write();
  account(unsent());
  // A write in flight continues in on_write; otherwise go on in a later turn (never
  // from here, where a caller may be in the middle of consume()).
  if (!writing_ && !stream_posted_) {
    stream_posted_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->stream_posted_ = false;
      if (self->stream_) {
        self->fill_from_stream();
      } else {
        self->finish_stream();
      }
    });
  }
}

// The streamed reply is all written: requests held back behind it go on.
void Session::finish_stream() {
  if (closed_) return;
  if (paused_ && !deferred_ && unsent() < server_.options.max_connection_output_bytes) {
    resume();
  }
}

// Takes up requests held back while paused.
void Session::resume() {
  paused_ = false;
  std::size_t used = consume(in_);
  if (closed_) return;
  in_.erase(0, used);
  after_consume();
}

// Tells the server this session now has `now` bytes unsent.
void Session::account(std::size_t now) {
  if (now == accounted_) return;
  const auto delta = static_cast<std::ptrdiff_t>(now) - static_cast<std::ptrdiff_t>(accounted_);
  accounted_ = now;
  server_.output_changed(delta);
}

void Session::do_write() {
  if (writing_ || closed_ || out_.empty()) return;
  // Most replies are a few bytes and the socket has room for them: send now (the socket
  // is non-blocking) and start an asynchronous write only for what is left, sparing the
  // operation and its completion handler. An error is left for async_write to report:
  // never close here, where a caller may be delivering to several sessions.
  error_code ec;
  std::size_t sent = 0;
  if (socket_.non_blocking()) {  // set at accept; a blocking send would stall the io thread
    sent = socket_.write_some(asio::buffer(out_), ec);
    if (ec) sent = 0;
  }
  if (sent == out_.size()) {
    out_.clear();
    if (out_.capacity() > kReadChunk) out_.shrink_to_fit();  // a big reply is gone
    return;
  }
  writing_ = true;
  pending_.swap(out_);
  out_.clear();
  asio::async_write(
      socket_, asio::buffer(pending_) + sent,
      [self = shared_from_this()](const error_code& ec, std::size_t) { self->on_write(ec); });
}

void Session::on_write(const error_code& ec) {
  writing_ = false;
  if (closed_) return;
  if (ec)
    return close(
        ec == asio::error::broken_pipe || ec == asio::error::connection_reset ? "" : ec.message());
  pending_.clear();
  if (pending_.capacity() > kReadChunk) pending_.shrink_to_fit();
  if (stream_) return fill_from_stream();
  do_write();
  account(unsent());
  finish_stream();
}

}  // namespace ddprun::store::server_detail
