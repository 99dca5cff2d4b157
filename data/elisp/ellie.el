;;; ellie.el --- Emacs client of Ollie, the Plan 9-style agent runtime  -*- lexical-binding: t; -*-

;; Package-Requires: ((emacs "28.1"))
;; Keywords: tools, processes

;;; Commentary:

;; ellie drives olliesrv through its files, as every other client does: each stream (an agent's
;; `chat', the `event' file) is one long-running `ollie-9p read' or `ollie-9p rdwr' process
;; whose output arrives through a process filter, each request is one short `ollie-9p' call.
;; Nothing polls.  What timers and process filters read is read by a process of its own, never
;; waited for: Emacs takes no input (not even C-g) while they run, and an olliesrv that takes
;; the connection but does not answer would otherwise hold Emacs for good.
;;
;; A chat addresses its agent by the session's and the agent's ids (walks take ids), so it keeps
;; working when either is renamed; the names it shows follow the rename events.
;;
;;   M-x ellie            pick or create a session and an agent, and chat with it
;;   M-x ellie-sessions   the sessions and their agents, live; RET opens, k kills
;;   M-x ellie-complete   ghost text at point from olliesrv's `complete'; TAB accepts it
;;   M-x ellie-bypass     decide the session's pending bypass requests
;;
;; In a chat buffer the prompt is typed at the bottom.  RET sends it (with a prefix argument it
;; is queued through the agent's `fifo' instead), C-c C-c stops the turn, C-c C-s shows the
;; agent's stats, C-c C-b decides pending bypass requests.  Lines starting with /verb or !cmd
;; are the server's prompt prefixes: /model, /tools, /clear, ... and !ls run at once.
;;
;; Put data/elisp (or the config root's elisp/) on `load-path' and (require 'ellie).  ollie-9p
;; must be on `exec-path'; `ellie-address' names another olliesrv than the default one.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'tabulated-list)

(defgroup ellie nil
  "Emacs client of Ollie."
  :group 'tools
  :prefix "ellie-")

(defcustom ellie-program "ollie-9p"
  "The ollie-9p executable."
  :type 'string)

(defcustom ellie-address nil
  "The olliesrv address given to ollie-9p as -a.
nil: $OLLIE_ADDR, else the service `ollie' of the plan9port namespace."
  :type '(choice (const :tag "Default" nil) string))

(defcustom ellie-timeout 10
  "Seconds a read from a timer or a process filter may take; then it is given up.
It runs in a process of its own: Emacs does not wait for it meanwhile."
  :type 'number)

(defcustom ellie-complete-context 4000
  "Characters of code sent on each side of point by `ellie-complete'."
  :type 'integer)

(defface ellie-ghost '((t :inherit shadow))
  "Face of the ghost text `ellie-complete' shows.")

(defface ellie-notice '((t :inherit font-lock-warning-face))
  "Face of ellie's own lines in a chat buffer (bypass requests, the end of the stream).")

;;;; Talking to olliesrv

(defun ellie--args (&rest args)
  (append (and ellie-address (list "-a" ellie-address)) args))

(defun ellie--call (input &rest args)
  "Run ollie-9p ARGS with INPUT (a string, or nil) on its stdin; return its output.
A failure is a `user-error' with ollie-9p's message."
  (let ((err (make-temp-file "ellie-err"))
        (coding-system-for-read 'utf-8)
        (coding-system-for-write 'utf-8))
    (unwind-protect
        (with-temp-buffer
          (let ((status (if input
                            (progn (insert input)
                                   (apply #'call-process-region (point-min) (point-max) ellie-program
                                          t (list t err) nil (apply #'ellie--args args)))
                          (apply #'call-process ellie-program nil (list t err) nil
                                 (apply #'ellie--args args)))))
            (unless (eql status 0)
              (user-error "%s" (string-trim (with-temp-buffer
                                              (insert-file-contents err)
                                              (buffer-string)))))
            (buffer-string)))
      (delete-file err))))

(defun ellie-read (path)
  "The content of the olliesrv file PATH."
  (ellie--call nil "read" path))

(defun ellie-write (path text)
  "Write TEXT to the olliesrv file PATH (its handler runs at the close)."
  (ellie--call text "write" path))

(defun ellie-rdwr (path request)
  "Send REQUEST to the olliesrv Rdwr file PATH; return the reply."
  (ellie--call request "rdwr" path))

(defun ellie--rows (text)
  "TEXT's lines split at tabs."
  (mapcar (lambda (line) (split-string line "\t")) (split-string text "\n" t)))

(defun ellie--follow (name args input filter &optional sentinel)
  "Start ollie-9p ARGS as process NAME; FILTER gets its output as it arrives.
With INPUT, that is written to its stdin, which is then closed
\(`rdwr' on `event')."
  (let* ((stderr (generate-new-buffer (format " *%s stderr*" name)))
         (proc (make-process :name name
                             :command (cons ellie-program (apply #'ellie--args args))
                             :coding 'utf-8
                             :connection-type 'pipe
                             :noquery t
                             :filter filter
                             :sentinel (lambda (proc event)
                                         (when sentinel (funcall sentinel proc event))
                                         (unless (process-live-p proc) (kill-buffer stderr)))
                             :stderr stderr)))
    (process-put proc 'stderr stderr)
    (when input
      (process-send-string proc input)
      (process-send-eof proc))
    proc))

(defun ellie--read-async (path callback)
  "Read the olliesrv file PATH without waiting; CALLBACK gets the content.
It gets nil when the read failed or took more than `ellie-timeout'
seconds.  For timers and process filters, which must never block."
  (let* ((out "")
         (timer nil)
         (proc (ellie--follow "ellie-read" (list "read" path) nil
                              (lambda (_proc text) (setq out (concat out text)))
                              (lambda (proc _event)
                                (unless (process-live-p proc)
                                  (cancel-timer timer)
                                  (funcall callback (and (eq (process-status proc) 'exit)
                                                         (eql (process-exit-status proc) 0)
                                                         out)))))))
    (setq timer (run-at-time ellie-timeout nil (lambda () (when (process-live-p proc) (delete-process proc)))))
    proc))

(defun ellie--quote (s)
  "S as one token of olliesrv's request grammar."
  (concat "'" (replace-regexp-in-string "'" "''" s) "'"))

(defun ellie--default-session ()
  "The directory's name, as a session name can be (64 characters at most,
not a name of the tree's own files, not shaped like an id), as `o' makes
it: each byte of its UTF-8 that a name cannot hold becomes a `-', and
one with nothing left is `o'."
  (let ((name (replace-regexp-in-string
               "\\`[^A-Za-z0-9]+" ""
               (replace-regexp-in-string "[^A-Za-z0-9._-]" "-"
                                         (encode-coding-string
                                          (file-name-nondirectory (directory-file-name default-directory))
                                          'utf-8)
                                         t t))))
    (setq name (substring name 0 (min (length name) 62)))
    (cond ((string-empty-p name) "o")
          ((or (member name '("new" "idx"))
               (string-match-p "\\`[[:xdigit:]]\\{8\\}-[[:xdigit:]]\\{4\\}-[[:xdigit:]]\\{4\\}-[[:xdigit:]]\\{4\\}-[[:xdigit:]]\\{12\\}\\'" name))
           (concat name "-1"))
          (t name))))

(defun ellie--sessions ()
  (mapcar #'car (ellie--rows (ellie-read "session/idx"))))

(defun ellie--agents (session)
  (mapcar #'car (ignore-errors (ellie--rows (ellie-read (format "session/%s/agent/idx" session))))))

(defun ellie--id (path)
  "The id in the olliesrv file PATH (an `id' file), or nil."
  (ignore-errors (string-trim (ellie-read path))))

(defun ellie--ensure (session agent)
  "Create SESSION (working in `default-directory') and its AGENT if missing.
Return their ids, (SESSION-ID . AGENT-ID).  A session made here for an
agent the server refuses is removed again; an existing session that works
in another directory is said."
  (let* ((made nil)
         (sid (or (ellie--id (format "session/%s/id" session))
                  (prog1 (string-trim
                          (ellie-rdwr "session/new" (format "name=%s cwd=%s\n" (ellie--quote session)
                                                            (ellie--quote (directory-file-name (expand-file-name default-directory))))))
                    (setq made t)))))
    (unless made (ellie--say-where session sid))
    (cons sid
          (or (ellie--id (format "session/%s/agent/%s/id" sid agent))
              (condition-case err
                  (string-trim (ellie-rdwr (format "session/%s/agent/new" sid) (format "name=%s\n" (ellie--quote agent))))
                (user-error
                 (when made (ignore-errors (ellie-rdwr (format "session/%s/ctl" sid) "kill")))
                 (signal (car err) (cdr err))))))))

(defvar ellie--picked nil
  "Non-nil while a chat opens from the session list: its session was picked where it works.")

(defun ellie--say-where (session sid)
  "Say so when SESSION (id SID) works elsewhere than `default-directory'.
What its agents do happens there, not in the directory ellie was called from."
  (pcase-let ((`(,_name ,_id ,cwd ,remote) (cl-find sid (ignore-errors (ellie--rows (ellie-read "session/idx")))
                                                    :key #'cadr :test #'equal)))
    (when (and cwd (not ellie--picked) (not (and (equal remote "-") (file-equal-p cwd default-directory))))
      (message "ellie: session %s works in %s%s, not here" session cwd
               (if (member remote '(nil "-")) "" (concat " on " remote))))))

(defun ellie--probe (path callback)
  "Ask olliesrv whether PATH is there, without waiting.
CALLBACK gets `here', `missing' (olliesrv answered that it is not) or
`away' (olliesrv could not be asked: stopped, restarting, or not
answering within `ellie-timeout' seconds)."
  (let* ((out "")
         (timer nil)
         (proc (make-process :name "ellie-probe"
                             :command (cons ellie-program (ellie--args "read" path))
                             :coding 'utf-8
                             :connection-type 'pipe
                             :noquery t
                             :filter (lambda (_proc text) (setq out (concat out text)))
                             :sentinel (lambda (proc _event)
                                         (unless (process-live-p proc)
                                           (cancel-timer timer)
                                           (funcall callback
                                                    (cond ((and (eq (process-status proc) 'exit)
                                                                (eql (process-exit-status proc) 0))
                                                           'here)
                                                          ((string-match-p ": file not found$" out) 'missing)
                                                          (t 'away))))))))
    (setq timer (run-at-time ellie-timeout nil (lambda () (when (process-live-p proc) (delete-process proc)))))
    proc))

(defun ellie--when-back (path then wanted)
  "Call THEN once olliesrv answers: with t when PATH is there, else nil.
Tried once a second, each try a process of its own (`ellie--probe'):
this runs from timers and sentinels.  For the streams a stop of
olliesrv ended.  Only olliesrv's own answer that PATH is not there
counts as its absence (a restarted olliesrv serves nothing before its
sessions are restored), never a try that could not reach it.  Tries
stop once WANTED, called before each, says nil (the buffer is gone)."
  (run-at-time 1 nil
               (lambda ()
                 (when (funcall wanted)
                   (ellie--probe path (lambda (answer)
                                        (if (eq answer 'away)
                                            (ellie--when-back path then wanted)
                                          (funcall then (eq answer 'here)))))))))

;;;; Chat buffers

(defvar-local ellie--session nil "The chat buffer's session name (as shown: it follows renames).")
(defvar-local ellie--agent nil "The chat buffer's agent name (as shown: it follows renames).")
(defvar-local ellie--session-id nil "The chat buffer's session id.")
(defvar-local ellie--agent-id nil "The chat buffer's agent id.")
(defvar-local ellie--stream nil "The `ollie-9p read chat' process.")
(defvar-local ellie--output nil "Marker: where the chat's output goes.")
(defvar-local ellie--input nil "Marker: the start of the text being typed.")

(defvar ellie-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'ellie-send)
    (define-key map (kbd "C-c C-c") #'ellie-stop)
    (define-key map (kbd "C-c C-s") #'ellie-stats)
    (define-key map (kbd "C-c C-b") #'ellie-bypass)
    map))

(define-derived-mode ellie-chat-mode text-mode "Ellie"
  "A conversation with an Ollie agent.
Its chat streams above; the prompt is typed below.
\\{ellie-chat-mode-map}"
  (setq-local buffer-undo-list t))

(defun ellie--path (&optional file)
  "The path of the chat's agent (of its FILE), by ids: a rename changes nothing."
  (concat (format "session/%s/agent/%s" ellie--session-id ellie--agent-id) (and file (concat "/" file))))

(defun ellie--buffer-name (session agent)
  (format "*ellie %s/%s*" session agent))

(defun ellie--insert-output (buffer text &optional face)
  "Insert TEXT in chat BUFFER above its prompt, keeping what is being typed."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let ((inhibit-read-only t)
            (at-end (>= (point) ellie--input)))
        (save-excursion
          (goto-char ellie--output)
          (insert (propertize text 'read-only t 'front-sticky t 'rear-nonsticky t
                              'face face)))
        (ellie--prompt-on-its-line)
        (when at-end
          (dolist (w (get-buffer-window-list buffer nil t))
            (set-window-point w (max (window-point w) ellie--input))))))))

(defun ellie--prompt-on-its-line ()
  "Keep the prompt at the start of a line.
A line the chat has not finished yet (a streamed answer) is followed by a
line break of ellie's own, taken away again once the chat ends the line."
  (let ((has (get-text-property ellie--output 'ellie-break))
        (needs (and (> ellie--output (point-min)) (/= (char-before ellie--output) ?\n))))
    (cond ((and needs (not has))
           (save-excursion
             (goto-char ellie--output)
             (insert (propertize "\n" 'ellie-break t 'read-only t 'front-sticky t 'rear-nonsticky t)))
           (set-marker ellie--output (1- ellie--output)))  ; the chat's text goes before it
          ((and has (not needs))
           (delete-region ellie--output (1+ ellie--output))))))

(defun ellie--chat-sentinel (proc _event)
  "Say why the chat of PROC ended.
At the agent's end that is all; when olliesrv went away (a stop ends the
chat at end of file too, a crash with an error), the chat is read again
once it is back: its last 64 KiB replace the old text."
  (let ((buffer (process-get proc 'ellie-buffer)))
    (when (and (not (process-live-p proc)) (buffer-live-p buffer))
      (ellie--probe (with-current-buffer buffer (ellie--path "id"))
                    (lambda (answer)
                      (if (eq answer 'missing)
                          (ellie--insert-output buffer "\n[chat ended: the agent is gone]\n" 'ellie-notice)
                        (ellie--chat-lost buffer)))))))

(defun ellie--chat-lost (buffer)
  "Say that BUFFER's chat went with olliesrv; read it again once it is back."
  (when (buffer-live-p buffer)
    (ellie--insert-output buffer "\n[chat lost: olliesrv went away; it comes back with olliesrv]\n" 'ellie-notice)
    (ellie--when-back (with-current-buffer buffer (ellie--path "id"))
                      (lambda (ok)
                        (when (buffer-live-p buffer)
                          (cond ((not ok)
                                 (ellie--insert-output buffer "[chat ended: the agent is gone]\n" 'ellie-notice))
                                ;; not when the chat was opened again meanwhile (M-x ellie)
                                ((not (process-live-p (buffer-local-value 'ellie--stream buffer)))
                                 (with-current-buffer buffer
                                   (let ((inhibit-read-only t))
                                     (delete-region (point-min) ellie--output)
                                     (ellie--prompt-on-its-line))
                                   (ellie--open-stream buffer))))))
                      (lambda () (buffer-live-p buffer)))))

(defun ellie--open-stream (buffer)
  "Start following the chat of BUFFER's agent, and the session's bypass requests."
  (with-current-buffer buffer
    (setq ellie--stream
          (ellie--follow (format "ellie-chat %s/%s" ellie--session ellie--agent) (list "read" (ellie--path "chat")) nil
                         (lambda (proc text) (ellie--insert-output (process-get proc 'ellie-buffer) text))
                         #'ellie--chat-sentinel))
    (process-put ellie--stream 'ellie-buffer buffer)
    (ellie--watch-events)))

(defun ellie--chat-buffers (&optional pred)
  "The chat buffers (for which PRED, called in each, holds)."
  (cl-remove-if-not (lambda (b) (with-current-buffer b
                                  (and ellie--agent-id (or (null pred) (funcall pred)))))
                    (buffer-list)))

(defun ellie--chat-buffer (session agent ids)
  "The chat buffer of SESSION's AGENT, streaming its `chat'.
IDS: their ids, (SESSION-ID . AGENT-ID).  A buffer is the agent's, whatever
its name says; one left by a killed agent of the same name is taken over."
  (let* ((name (ellie--buffer-name session agent))
         (buffer (or (car (ellie--chat-buffers (lambda () (equal ellie--agent-id (cdr ids)))))
                     (let ((b (get-buffer name)))
                       (and b (not (process-live-p (buffer-local-value 'ellie--stream b))) b))
                     (generate-new-buffer name))))
    (with-current-buffer buffer
      (unless (and (derived-mode-p 'ellie-chat-mode) (process-live-p ellie--stream))
        ;; Text typed for a killed agent is kept for the one made again in its place.
        (let ((typed (and (derived-mode-p 'ellie-chat-mode) (markerp ellie--input) (marker-buffer ellie--input)
                          (buffer-substring-no-properties ellie--input (point-max)))))
          (ellie-chat-mode)
          (setq ellie--session session ellie--agent agent ellie--session-id (car ids) ellie--agent-id (cdr ids))
          (let ((inhibit-read-only t))
            (erase-buffer)
            (insert (propertize "> " 'read-only t 'front-sticky t 'rear-nonsticky t 'field 'prompt)))
          (setq ellie--output (copy-marker (point-min) t))
          (setq ellie--input (copy-marker (point-max)))
          (goto-char (point-max))
          (when typed (insert typed))
          (ellie--open-stream buffer)
          (add-hook 'kill-buffer-hook (lambda () (when (process-live-p ellie--stream) (delete-process ellie--stream)))
                    nil t)
          (ellie--show-pending (car ids) buffer))))
    buffer))

(defvar ellie--name-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map minibuffer-local-completion-map)
    (define-key map (kbd "SPC") #'self-insert-command)
    map)
  "Name completion where SPC inserts itself.
The server says what a name may hold.")

;;;###autoload
(defun ellie (session agent)
  "Chat with AGENT of SESSION, creating them if they do not exist.
A new session works in `default-directory'."
  (interactive
   (let* ((minibuffer-local-completion-map ellie--name-map)  ; SPC is a character, not completion
          (session (completing-read (format-prompt "Session" (ellie--default-session)) (ellie--sessions)
                                    nil nil nil nil (ellie--default-session)))
          (agent (completing-read (format-prompt "Agent" "main") (ellie--agents session) nil nil nil nil "main")))
     (list session agent)))
  (ellie--watch-events)  ; first: it subscribes while the session and agent are made
  (pop-to-buffer (ellie--chat-buffer session agent (ellie--ensure session agent))))

(defun ellie-send (&optional queue)
  "Send the typed text as a prompt.
With QUEUE (a prefix argument), append it to the agent's `fifo' instead."
  (interactive "P")
  (let ((text (string-trim-right (buffer-substring-no-properties ellie--input (point-max)))))
    (unless (string-empty-p text)
      (let* ((runs-at-once (string-match-p "\\`\\(/[^/]\\|/\\'\\|!\\)" text))  ; /verb, !command (spec §3.4)
             (state (unless (or queue runs-at-once) (ellie--state))))
        (condition-case e
            (ellie-write (ellie--path (if queue "fifo" "prompt")) (concat text "\n"))
          (user-error
           ;; walks take the ids this buffer holds: "<aid>: file not found" is the agent's end
           (if (string-match-p ": file not found\\'" (cadr e))
               (user-error "ellie: the agent is gone (M-x ellie %s %s makes it again)" ellie--session ellie--agent)
             (signal (car e) (cdr e)))))
        (let ((inhibit-read-only t))
          (delete-region ellie--input (point-max)))
        (cond ((and queue (not runs-at-once))
               (message "ellie: queued: it runs once the turns before it are done"))
              ((and state (not (equal state "idle")))
               (message "ellie: queued: the agent is %s; it runs when the turn ends" state)))))))

(defun ellie--state ()
  "The state of the chat's agent, from `agent/idx' (nil when unknown)."
  (let (state)
    (dolist (row (ignore-errors (ellie--rows (ellie-read (format "session/%s/agent/idx" ellie--session-id)))))
      (when (equal (nth 1 row) ellie--agent-id) (setq state (nth 2 row))))
    state))

(defun ellie-stop ()
  "Stop the agent's running turn."
  (interactive)
  (message "ellie: %s" (string-trim (ellie-rdwr (ellie--path "ctl") "stop"))))

(defun ellie-stats ()
  "Show the agent's usage, context and cost."
  (interactive)
  (let ((stats (ellie-read (ellie--path "stats"))))
    (message "%s" (string-join (split-string stats "\n" t) "  "))
    stats))

;;;; Events: bypass requests, renames

(defvar ellie--events nil "The process following bypass requests and renames.")
(defvar ellie--events-partial "" "An unfinished event line.")

(defun ellie--events-filter (_proc text)
  "Show bypass requests in their session's chats, and then how they were decided;
show names as renamed.
Nothing here waits for olliesrv (`ellie--read-async'): this is a process filter."
  (setq text (concat ellie--events-partial text))
  (let ((lines (split-string text "\n")))
    (setq ellie--events-partial (car (last lines)))
    (dolist (line (butlast lines))
      (cond
       ;; bypass.<sid>.request <reqid> session/<s>/agent/<a> <tool>
       ((string-match "\\`bypass\\.\\([^.]+\\)\\.request \\([0-9]+\\) session/[^/]+/agent/\\([^ ]+\\) \\(.*\\)\\'" line)
        (let ((sid (match-string 1 line)) (reqid (match-string 2 line))
              (agent (match-string 3 line)) (tool (match-string 4 line)))
          (ellie--read-async (format "bypass/pending/%s" sid)
                             (lambda (pending)  ; nil: not read in time; the tool is all that is known
                               (let ((row (assoc reqid (and pending (ellie--rows pending)))))
                                 ;; read, and no longer listed: decided already, nothing to ask
                                 (when (or row (null pending))
                                   (ellie--note-bypass sid reqid agent tool (or (nth 3 row) tool))))))))
       ;; bypass.<sid>.resolve <reqid> allow|deny
       ((string-match "\\`bypass\\.\\([^.]+\\)\\.resolve \\([0-9]+\\) \\(allow\\|deny\\)\\'" line)
        (let ((sid (match-string 1 line))
              (key (concat (match-string 1 line) " " (match-string 2 line)))
              (word (if (equal (match-string 3 line) "allow") "(allowed)" "(denied)")))
          (dolist (b (ellie--chat-buffers (lambda () (equal ellie--session-id sid))))
            (with-current-buffer b (ellie--mark-bypass key word)))))
       ;; session.<sid>.rename session/<old> session/<new>
       ((string-match "\\`session\\.\\([^.]+\\)\\.rename session/[^ ]+ session/\\([^ /]+\\)\\'" line)
        (let ((sid (match-string 1 line)) (name (match-string 2 line)))
          (dolist (b (ellie--chat-buffers (lambda () (equal ellie--session-id sid))))
            (with-current-buffer b (setq ellie--session name) (ellie--rename-buffer)))))
       ;; agent.<aid>.rename session/<s>/agent/<old> session/<s>/agent/<new>
       ((string-match "\\`agent\\.\\([^.]+\\)\\.rename [^ ]+ session/[^/]+/agent/\\([^ /]+\\)\\'" line)
        (let ((aid (match-string 1 line)) (name (match-string 2 line)))
          (dolist (b (ellie--chat-buffers (lambda () (equal ellie--agent-id aid))))
            (with-current-buffer b (setq ellie--agent name) (ellie--rename-buffer)))))))))

(defun ellie--rename-buffer ()
  "Name the chat buffer after its current names."
  (rename-buffer (ellie--buffer-name ellie--session ellie--agent) t))

(defun ellie--note-bypass (sid reqid agent tool summary &optional only)
  "Show bypass request REQID of session SID in its chat buffers, or in ONLY.
AGENT asks to run TOOL as SUMMARY."
  (let ((note (concat (format "[bypass %s] %s wants to run %s outside the sandbox: %s  "
                              reqid agent tool summary)
                      (propertize "(C-c C-b to decide)" 'ellie-bypass (concat sid " " reqid))
                      "\n")))
    (dolist (buffer (if only (list only) (ellie--chat-buffers (lambda () (equal ellie--session-id sid)))))
      (ellie--insert-output buffer note 'ellie-notice))
    (message "ellie: %s" (string-trim note))))

(defun ellie--mark-bypass (key word)
  "Put WORD where the note of bypass request KEY asks to decide it.
KEY is \"<sid> <reqid>\"."
  (let ((inhibit-read-only t) (pos (point-min)))
    (while (setq pos (next-single-property-change pos 'ellie-bypass))
      (when (equal (get-text-property pos 'ellie-bypass) key)
        (let ((end (next-single-property-change pos 'ellie-bypass nil (point-max))))
          (save-excursion
            (goto-char pos)
            (delete-region pos end)
            (insert (propertize word 'read-only t 'front-sticky t 'rear-nonsticky t 'face 'ellie-notice))))))))

(defun ellie--show-pending (sid buffer)
  "Show the pending requests of session SID in its chat BUFFER, just opened.
Their events came before the watch began; buffers open before have them."
  (pcase-dolist (`(,reqid ,agent ,tool ,summary) (ignore-errors (ellie--pending sid)))
    (ellie--note-bypass sid reqid agent tool summary buffer)))

(defun ellie--watch-events ()
  "Follow bypass requests and renames of every session (once per Emacs)."
  (unless (process-live-p ellie--events)
    (setq ellie--events-partial "")
    (setq ellie--events
          (ellie--follow "ellie-events" (list "rdwr" "event") "bypass.*.request bypass.*.resolve session.*.rename agent.*.rename\n"
                         #'ellie--events-filter
                         (lambda (proc _event)
                           ;; ended by olliesrv's stop (end of file) or crash (an error) while chats
                           ;; are open: followed again once it is back
                           (when (and (not (process-live-p proc)) (ellie--chat-buffers))
                             (ellie--when-back "session/idx" (lambda (_) (ellie--watch-events))
                                               #'ellie--chat-buffers)))))))

(defun ellie--pending (session)
  "SESSION's pending bypass requests: (reqid agent tool summary) lists.
SESSION is a name or an id."
  (ellie--rows (ellie-read (format "bypass/pending/%s" session))))

(defun ellie-bypass (session)
  "Decide each pending bypass request of SESSION (a name, or in a chat its id).
Each question shows exactly what would run."
  (interactive (list (or ellie--session-id (completing-read "Session: " (ellie--sessions)))))
  (let ((pending (ellie--pending session)) (decided 0) (refused nil))
    (if (null pending)
        (message "ellie: no bypass request is pending in %s" (or ellie--session session))
      (pcase-dolist (`(,reqid ,agent ,tool ,summary) pending)
        (let ((answer (read-char-choice
                       (format "%s wants to run %s outside the sandbox:\n  %s\ny: allow once, a: allow always, n: deny, s: skip "
                               agent tool summary)
                       '(?y ?a ?n ?s))))
          (unless (eq answer ?s)
            ;; A refused decision (`allow always' of a multi-line command) is said, and the
            ;; requests after it are still asked.
            (condition-case err
                (progn
                  (ellie-write (format "bypass/pending/%s" session)
                               (format "%s %s\n" reqid (pcase answer (?y "allow") (?a "allow always") (?n "deny"))))
                  (cl-incf decided))
              (user-error (push (format "request %s: %s" reqid
                                        (replace-regexp-in-string "\\`ollie-9p: [^ ]*: " "" (error-message-string err)))
                                refused))))))
      (message "ellie: %d of %d decided%s" decided (length pending)
               (if refused (concat "; refused: " (string-join (nreverse refused) "; ")) "")))))

;;;; Completion

(defvar-local ellie--ghost nil "The overlay showing the offered completion.")

(defun ellie--ghost-clear ()
  (when (overlayp ellie--ghost) (delete-overlay ellie--ghost))
  (setq ellie--ghost nil))

(defun ellie--show-ghost (buffer pos tick text)
  "Offer TEXT at POS of BUFFER, if neither its text nor point moved since TICK."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (cond
       ((string-empty-p text) (message "ellie: no completion"))
       ((not (and (= (point) pos) (= (buffer-chars-modified-tick) tick)))
        (message "ellie: completion dropped: the text or point moved meanwhile"))
       (t
        (message nil)
        (ellie--ghost-clear)
        (let ((ghost (propertize text 'face 'ellie-ghost)))
          (put-text-property 0 1 'cursor t ghost)
          (setq ellie--ghost (make-overlay pos pos nil t))
          (overlay-put ellie--ghost 'after-string ghost)
          (overlay-put ellie--ghost 'ellie-text text))
        ;; The map's exit (which clears the ghost) comes before the next command runs: the
        ;; accepting command carries its own copy of the text.
        (let ((map (make-sparse-keymap))
              (accept (lambda () "Insert the offered completion." (interactive)
                        (with-current-buffer buffer (goto-char pos) (insert text)))))
          (define-key map (kbd "TAB") accept)
          (define-key map [tab] accept)
          (set-transient-map map nil
                             (lambda () (when (buffer-live-p buffer)
                                          (with-current-buffer buffer (ellie--ghost-clear)))))))))))

;;;###autoload
(defun ellie-complete ()
  "Ask olliesrv's `complete' for code to insert at point; show it as ghost text.
TAB accepts it, any other key dismisses it."
  (interactive)
  (let* ((buffer (current-buffer)) (pos (point)) (tick (buffer-chars-modified-tick))
         (code (concat (buffer-substring-no-properties (max (point-min) (- pos ellie-complete-context)) pos)
                       "{{CURSOR}}"
                       (buffer-substring-no-properties pos (min (point-max) (+ pos ellie-complete-context)))))
         (lang (string-remove-suffix "-mode" (symbol-name major-mode)))
         (reply ""))
    (ellie--ghost-clear)
    (ellie--follow "ellie-complete" (list "rdwr" "complete") (format "lang=%s\n\n%s" lang code)
                   (lambda (_proc text) (setq reply (concat reply text)))
                   (lambda (proc _event)
                     (unless (process-live-p proc)
                       (if (eql (process-exit-status proc) 0)
                           (ellie--show-ghost buffer pos tick reply)
                         (message "ellie: complete: %s"
                                  (with-current-buffer (process-get proc 'stderr)
                                    (string-trim (buffer-string))))))))
    (message "ellie: completing...")))

;;;; The session list

(defvar-local ellie--list-watch nil "The process following the events.")
(defvar-local ellie--list-reads 0 "How many times the list was read again: only the last one shows.")

(defun ellie--list-rows (sessions agents)
  "The list's entries: SESSIONS (rows of `session/idx') and their AGENTS.
AGENTS is a function: the rows of a session's `agent/idx' (its id given)."
  (cl-loop for (session sid) in sessions
           for rows = (funcall agents sid)
           if rows
           append (cl-loop for (agent _id state _profile _backend model cwd) in rows
                           collect (list (cons session agent) (vector session agent state (or model "") (or cwd ""))))
           else collect (list (cons session nil) (vector session "-" "" "" ""))))

(defun ellie--list-entries ()
  "The list's entries, read now (for commands: C-g stops them)."
  (ellie--list-rows (ellie--rows (ellie-read "session/idx"))
                    (lambda (sid) (ignore-errors (ellie--rows (ellie-read (format "session/%s/agent/idx" sid)))))))

(defun ellie--list-refresh (buffer)
  "Read BUFFER's session list again and show it, without waiting for olliesrv.
For the event filter and the timers; several at once show the last one only."
  (let ((n (cl-incf (buffer-local-value 'ellie--list-reads buffer))))
    (ellie--read-async
     "session/idx"
     (lambda (idx)
       (let* ((sessions (and idx (ellie--rows idx)))
              (agents (make-hash-table :test #'equal))
              (left (length sessions))
              (show (lambda ()
                      (when (and (buffer-live-p buffer) (= n (buffer-local-value 'ellie--list-reads buffer)))
                        (with-current-buffer buffer
                          (setq tabulated-list-entries (ellie--list-rows sessions (lambda (sid) (gethash sid agents))))
                          (tabulated-list-print t))))))
         (cond ((null idx))  ; not read: the list stays as it was
               ((zerop left) (funcall show))
               (t (pcase-dolist (`(,_session ,sid) sessions)
                    (ellie--read-async (format "session/%s/agent/idx" sid)
                                       (lambda (rows)
                                         (puthash sid (and rows (ellie--rows rows)) agents)
                                         (when (zerop (cl-decf left)) (funcall show))))))))))))

(defvar ellie-sessions-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'ellie-sessions-open)
    (define-key map (kbd "k") #'ellie-sessions-kill)
    map))

(define-derived-mode ellie-sessions-mode tabulated-list-mode "Ellie-Sessions"
  "Ollie's sessions and their agents, kept current by the event stream.
\\{ellie-sessions-mode-map}"
  (setq tabulated-list-format [("Session" 16 t) ("Agent" 14 t) ("State" 18 t) ("Model" 20 t) ("Cwd" 0 t)])
  (setq tabulated-list-sort-key (cons "Session" nil))
  (add-hook 'tabulated-list-revert-hook (lambda () (setq tabulated-list-entries (ellie--list-entries))) nil t)
  (tabulated-list-init-header))

;;;###autoload
(defun ellie-sessions ()
  "List Ollie's sessions and agents; RET opens a chat, k kills a session."
  (interactive)
  (let ((buffer (get-buffer-create "*ellie sessions*")))
    (with-current-buffer buffer
      (unless (derived-mode-p 'ellie-sessions-mode)  ; the mode would forget the watcher below
        (ellie-sessions-mode)
        (add-hook 'kill-buffer-hook (lambda () (when (process-live-p ellie--list-watch)
                                                 (delete-process ellie--list-watch)))
                  nil t))
      (setq tabulated-list-entries (ellie--list-entries))
      (tabulated-list-print)
      (ellie--watch-list buffer))
    (pop-to-buffer buffer)))

(defun ellie--watch-list (buffer)
  "Keep BUFFER's session list current through the events; again after a restart."
  (with-current-buffer buffer
    (unless (process-live-p ellie--list-watch)
      (setq ellie--list-watch
            (ellie--follow "ellie-sessions" (list "rdwr" "event") "session.* agent.*\n"
                           (lambda (_proc _text)
                             (when (buffer-live-p buffer) (ellie--list-refresh buffer)))
                           (lambda (proc _event)
                             ;; ended by olliesrv's stop or crash: followed again once it is back
                             (when (and (not (process-live-p proc)) (buffer-live-p buffer))
                               (ellie--when-back "session/idx"
                                                 (lambda (_)
                                                   (when (buffer-live-p buffer)
                                                     (ellie--list-refresh buffer)
                                                     (ellie--watch-list buffer)))
                                                 (lambda () (buffer-live-p buffer))))))))))

(defun ellie-sessions-open ()
  "Open the chat of the agent on this line.
On a session without agents, an agent `main' is created."
  (interactive)
  (pcase-let ((`(,session . ,agent) (tabulated-list-get-id)))
    (when session
      (let ((ellie--picked t))  ; chosen from the list, where it shows its directory: nothing to say
        (ellie session (or agent "main"))))))

(defun ellie-sessions-kill ()
  "Kill the session on this line, after confirmation."
  (interactive)
  (let ((session (car (tabulated-list-get-id))))
    (when (and session (yes-or-no-p (format "Kill session %s and all its agents? " session)))
      (message "ellie: %s" (string-trim (ellie-rdwr (format "session/%s/ctl" session) "kill")))
      (revert-buffer))))

(provide 'ellie)
;;; ellie.el ends here
